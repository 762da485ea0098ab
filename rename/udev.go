package rename

import (
	"fmt"
	"path"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
)

// CheckUdevDevice checks that name is the device of the udev event whose
// DEVPATH (/devices/virtual/infiniband/rxe0) udev put in the environment;
// devpath is "" outside udev. udev substitutes %k into the RUN command
// before it splits it, and has no escape for a ' inside '%k': a kernel
// name with a ' in it would arrive as another name, perhaps another
// device's. The error says which happened: the event's name less its
// quotes, or another name than the rule's %k (a rule that passes
// something else, or a command run by hand with DEVPATH set).
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
	why := "the command names another device than the event's: the rule must pass '%k'"
	if strings.ContainsRune(event, '\'') && strings.ReplaceAll(event, "'", "") == name {
		why = "udev drops the quotes of a name with ' in it"
	}
	return fmt.Errorf("rename: the udev event is for device %s (DEVPATH=%s), not %s (%s)", quote.String(event), quote.Line(devpath), quote.String(name), why)
}
