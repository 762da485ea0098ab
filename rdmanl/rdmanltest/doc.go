// Package rdmanltest is RDMA netlink for the tests of the packages above
// rdmanl. Replay serves replies recorded from lab kernels (rdmanl/testdata,
// recorded by rdmanl's TestLabRecord) to an rdmanl.Client, so that they see
// what a real kernel said; Host is a fake host whose devices and resources
// a test changes while its clients read them as an rdmanl.Client would.
//
// It is for tests only: Replay fails the test on a request that no
// recording answers.
package rdmanltest
