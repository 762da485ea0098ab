package uverbs

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"testing"
)

func TestDecodeQueryDevice(t *testing.T) {
	b := make([]byte, queryDeviceResp)
	ne := binary.NativeEndian
	binary.BigEndian.PutUint64(b[8:16], 0x021122fffe334455) // node_guid, big endian on the wire
	for off, v := range map[int]uint32{40: 0x15b3, 44: 4123, 52: 262144, 56: 32768, 72: 16777216, 80: 16777216, 84: 8388608, 156: 8388608} {
		ne.PutUint32(b[off:off+4], v)
	}
	b[171] = 2
	want := DeviceAttr{NodeGUID: 0x021122fffe334455, VendorID: 0x15b3, VendorPart: 4123, MaxQP: 262144, MaxQPWR: 32768,
		MaxCQ: 16777216, MaxMR: 16777216, MaxPD: 8388608, MaxSRQ: 8388608, PhysPortCnt: 2}
	if got := decodeQueryDevice(b); got != want {
		t.Errorf("decode = %+v, want %+v", got, want)
	}
}

func TestQueryDeviceNotUverbs(t *testing.T) {
	if _, err := QueryDevice("/nonexistent/uverbs0"); !errors.Is(err, fs.ErrNotExist) || err.Error() != "uverbs: /nonexistent/uverbs0: open: no such file or directory" {
		t.Errorf("missing device: %v", err)
	}
	// /dev/null takes the commands and answers nothing.
	if _, err := QueryDevice("/dev/null"); err == nil || err.Error() != "uverbs: /dev/null: query the device: no answer: not a uverbs device" {
		t.Errorf("/dev/null: %v", err)
	}
}
