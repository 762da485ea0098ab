// Package rowfilter parses what users type to select the rows of a
// listing (rdmatool res ..., link show): iproute2-style filters ("lqpn
// 0-6", "state ERR"), numbers, device names and DEV[/PORT] links, and
// matches rows against a parsed filter. Everything is checked before the
// kernel is asked: an enumerated value against the kernel's names, a
// device name against what the kernel can hold, the selectors (dev, link)
// given at most once. It needs no privileges and makes no system call.
//
// It is apart from the command so that its fuzz targets run without the
// command's dependencies: Go instruments every package of a fuzz test's
// binary, so a small binary runs many times more inputs per second.
package rowfilter
