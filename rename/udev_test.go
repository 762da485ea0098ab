package rename

import (
	"strings"
	"testing"
)

func TestCheckUdevDevice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, dev, devpath string
		wantErr            string // a substring; "" for no error
	}{
		{"outside udev", "rxe0", "", ""},
		{"virtual device", "rxe0", "/devices/virtual/infiniband/rxe0", ""},
		{"PCI device", "mlx5_0", "/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0", ""},
		{"a '/' in the name", "a/b", "/devices/virtual/infiniband/a!b", ""},
		{"a ' in the name, dropped by udev", "labq", "/devices/virtual/infiniband/lab'q", "udev drops the quotes of a name with ' in it"},
		{"another device", "rxe1", "/devices/virtual/infiniband/rxe0", `for device "rxe0" (DEVPATH=/devices/virtual/infiniband/rxe0), not "rxe1" (the command names another device than the event's: the rule must pass '%k')`},
		{"a ' in the event's name, but another name", "rxe1", "/devices/virtual/infiniband/lab'q", "the rule must pass '%k'"},
		{"a long name is cut", strings.Repeat("x", 1<<20), "/devices/virtual/infiniband/rxe0", `(1048576 bytes)`},
		{"a long DEVPATH is cut", "rxe1", "/devices/" + strings.Repeat("d", 100000) + "/infiniband/rxe0", `… (100025 bytes)), not "rxe1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckUdevDevice(tt.dev, tt.devpath)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckUdevDevice(%.70q, %q) = %v, want no error", tt.dev, tt.devpath, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CheckUdevDevice(%.70q, %q) = %v, want an error with %q", tt.dev, tt.devpath, err, tt.wantErr)
			case err != nil && len(err.Error()) > 1024:
				t.Errorf("CheckUdevDevice: error of %d bytes", len(err.Error()))
			}
			if tt.wantErr != "" && strings.Contains(tt.wantErr, "must pass") && strings.Contains(err.Error(), "quotes") {
				t.Errorf("CheckUdevDevice(%q, %q) = %v: blames the quotes", tt.dev, tt.devpath, err)
			}
		})
	}
}
