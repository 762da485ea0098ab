package uverbs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmatool/rdmatool/vmtest"
)

// The verbs query answers what ibv_devinfo (libibverbs) reports for the
// lab's devices: max_qp and the rest of the limits, and the node GUID and
// port count netlink and sysfs know, which checks the ABI layout.
func TestLabQueryDevice(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, dev := range []string{"rxe0", "siw0"} {
		t.Run(dev, func(t *testing.T) {
			uverbs := ""
			matches, _ := filepath.Glob("/sys/class/infiniband_verbs/uverbs*/ibdev")
			for _, m := range matches {
				if b, err := os.ReadFile(m); err == nil && strings.TrimSpace(string(b)) == dev {
					uverbs = filepath.Base(filepath.Dir(m))
				}
			}
			if uverbs == "" {
				t.Fatalf("no uverbs device for %s", dev)
			}
			a, err := QueryDevice("/dev/infiniband/" + uverbs)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s (%s): max_qp %d max_qp_wr %d max_cq %d max_mr %d max_pd %d max_srq %d ports %d vendor %#x/%d",
				dev, uverbs, a.MaxQP, a.MaxQPWR, a.MaxCQ, a.MaxMR, a.MaxPD, a.MaxSRQ, a.PhysPortCnt, a.VendorID, a.VendorPart)
			guid, err := os.ReadFile("/sys/class/infiniband/" + dev + "/node_guid")
			if err != nil {
				t.Fatal(err)
			}
			g := a.NodeGUID
			if want := fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff); strings.TrimSpace(string(guid)) != want {
				t.Errorf("node GUID %s from the verbs query, sysfs says %s", want, guid)
			}
			out, err := exec.Command("ibv_devinfo", "-v", "-d", dev).Output()
			if err != nil {
				t.Fatalf("ibv_devinfo: %v", err)
			}
			for field, got := range map[string]uint32{"max_qp": a.MaxQP, "max_qp_wr": a.MaxQPWR, "max_cq": a.MaxCQ,
				"max_mr": a.MaxMR, "max_pd": a.MaxPD, "max_srq": a.MaxSRQ, "phys_port_cnt": uint32(a.PhysPortCnt)} {
				m := regexp.MustCompile(`(?m)^\s*` + field + `:\s*(\d+)`).FindSubmatch(out)
				if m == nil {
					t.Errorf("ibv_devinfo has no %s:\n%s", field, out)
					continue
				}
				if want, _ := strconv.ParseUint(string(m[1]), 10, 32); uint32(want) != got {
					t.Errorf("%s %d, ibv_devinfo says %d", field, got, want)
				}
			}
		})
	}
}
