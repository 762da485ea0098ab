package rename

import (
	"fmt"
	"strings"

	"github.com/rdmatool/rdmatool/sysfs"
)

// pciPolicyName is the name rdma-core's rdma_rename gives a device under NAME_PCI:
// the protocol prefix, then "P<domain>" when the domain is not 0,
// "p<bus>s<slot>", "f<function>" when the function is not 0 or the device
// is multi-function (then "v<vf>" for a VF), and "S<sfnum>" for a
// sub-function, all in decimal ("ibp0s12f4", "rocep193s0f0v0S99").
//
// rdma_rename means to use a physical slot's number ("s<n>") where
// /sys/bus/pci/slots lists one, but its lookup never matches (it scans the
// address with "%s.%s", whose first %s takes the whole address), so its
// names always use the bus and device numbers; so do these.
func pciPolicyName(protocol string, loc sysfs.PCILocation) string {
	var b strings.Builder
	b.WriteString(namePrefix(protocol))
	if loc.Domain > 0 {
		fmt.Fprintf(&b, "P%d", loc.Domain)
	}
	fmt.Fprintf(&b, "p%ds%d", loc.Bus, loc.Slot)
	if loc.Func > 0 || loc.Multifunction {
		fmt.Fprintf(&b, "f%d", loc.Func)
		if loc.IsVF {
			fmt.Fprintf(&b, "v%d", loc.VF)
		}
	}
	if loc.IsSF {
		fmt.Fprintf(&b, "S%d", loc.SFNum)
	}
	return b.String()
}
