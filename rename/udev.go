package rename

import (
	"fmt"
	"path"
	"strings"
)

// CheckUdevDevice checks that name is the device of the udev event whose
// DEVPATH (/devices/virtual/infiniband/rxe0) udev put in the environment;
// devpath is "" outside udev. udev substitutes %k into the RUN command
// before it splits it, and has no escape for a ' inside '%k': a kernel
// name with a ' in it would arrive as another name, perhaps another
// device's.
func CheckUdevDevice(name, devpath string) error {
	if devpath == "" {
		return nil
	}
	// sysfs writes '/' in a kernel object's name as '!'; udev's %k turns
	// it back.
	event := strings.ReplaceAll(path.Base(devpath), "!", "/")
	if event == name {
		return nil
	}
	return fmt.Errorf("rename: the udev event is for device %q (DEVPATH=%s), not %q (udev drops the quotes of a name with ' in it)", event, devpath, name)
}
