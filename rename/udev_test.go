package rename

import "testing"

func TestCheckUdevDevice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, dev, devpath string
		wantErr            bool
	}{
		{"outside udev", "rxe0", "", false},
		{"virtual device", "rxe0", "/devices/virtual/infiniband/rxe0", false},
		{"PCI device", "mlx5_0", "/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0", false},
		{"a '/' in the name", "a/b", "/devices/virtual/infiniband/a!b", false},
		{"another device", "labq", "/devices/virtual/infiniband/lab'q", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckUdevDevice(tt.dev, tt.devpath); (err != nil) != tt.wantErr {
				t.Errorf("CheckUdevDevice(%q, %q) = %v, want error %v", tt.dev, tt.devpath, err, tt.wantErr)
			}
		})
	}
}
