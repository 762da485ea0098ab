package sysfs

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzReadPCIFunction: whatever a PCI function's vendor, device and
// reset_method files hold, readPCIFunction gives the ids they say, or an
// error, never a panic. The files are rewritten in one directory per
// fuzzing process.
func FuzzReadPCIFunction(f *testing.F) {
	for _, s := range [][3]string{
		{"0x15b3\n", "0x1017\n", "flr bus\n"}, {"0x8086", "0x10d3", ""}, {"15b3", "0x1017", "pm"},
		{"0x", "0x1", " "}, {"0x10000", "0xffff", "flr\tbus\n\n"}, {"0xFFFF\n", "0x-1", "x"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, vendor, device, resetMethod string) {
		for name, content := range map[string]string{"vendor": vendor, "device": device, "reset_method": resetMethod} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		fn, err := readPCIFunction(dir, "0000:3b:00.0")
		if err != nil {
			return
		}
		for _, id := range []struct {
			text string
			got  uint16
		}{{vendor, fn.VendorID}, {device, fn.DeviceID}} {
			hex, ok := strings.CutPrefix(strings.TrimSpace(id.text), "0x")
			if v, err := strconv.ParseUint(hex, 16, 16); !ok || err != nil || uint16(v) != id.got {
				t.Errorf("id file %q read as %#x", id.text, id.got)
			}
		}
		if !fn.HasResetMethod || !slices.Equal(fn.ResetMethods, strings.Fields(resetMethod)) {
			t.Errorf("reset_method %q read as %q", resetMethod, fn.ResetMethods)
		}
	})
}

// FuzzParsePortAttrs: a port's state and rate attributes parse or are
// refused, never a panic; a parsed state keeps the number written.
func FuzzParsePortAttrs(f *testing.F) {
	for _, s := range [][2]string{{"4: ACTIVE", "100 Gb/sec (4X EDR)"}, {"1: DOWN", "2.5 Gb/sec (1X SDR)"}, {"x", "-1 Gb/sec"}, {":", "NaN"}, {"4294967296: X", "1e40"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, state, rate string) {
		if id, _, err := parseStateAttr(state); err == nil {
			want, _, _ := strings.Cut(state, ":")
			if strconv.FormatUint(uint64(id), 10) != strings.TrimLeft(strings.TrimSpace(want), "+0") && id != 0 {
				t.Errorf("parseStateAttr(%q) = %d", state, id)
			}
		}
		parseRateAttr(rate)
	})
}
