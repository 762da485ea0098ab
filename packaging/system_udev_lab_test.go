package packaging

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/vmtest"
)

// debianNamingRule is rdma-core's naming rule as Debian 12 ships it.
const (
	debianNamingRuleFile = "/lib/udev/rules.d/60-rdma-persistent-naming.rules"
	debianNamingRule     = `ACTION=="add", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FALLBACK"`
)

// systemLinks is an operator's unit that makes the soft RDMA devices of the
// udev test at every boot, under kernel names the udev rules may change.
const systemLinks = `[Unit]
Description=soft RDMA devices of TestSystemUdevNames
After=systemd-udevd.service rdma-hw.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link add name dummy2 address 02:00:00:00:04:01 type dummy
ExecStart=/sbin/ip link add name dummy3 address 02:00:00:00:05:01 type dummy
ExecStart=/sbin/ip link set dummy2 up
ExecStart=/sbin/ip link set dummy3 up
ExecStart=/usr/bin/rdma link add labrxe2 type rxe netdev dummy2
ExecStart=/usr/bin/rdma link add labrxe3 type rxe netdev dummy3
[Install]
WantedBy=multi-user.target
`

// udevNames is what boot 1 saw, kept on the root disk for boot 2.
type udevNames struct {
	ByGUID map[string]string `json:"by_guid"`
}

const udevNamesFile = "/var/lib/rdmatool-system-test/udev-names.json"

// TestSystemUdevNames: the package's udev rule beside rdma-core's, as
// Debian ships both, names devices as docs/naming.md and
// packaging/udev/README.md promise, at `rdma link add` and again after a
// reboot, where the same node GUID gets the same name.
//
// Precedence: udev evaluates the rules of every file first, running
// rdma-core's PROGRAM (rdma_rename %k NAME_FALLBACK) as it goes, and only
// then the RUN programs, so rdma-core acts first and rdmatool's
// rdmatool-udev-rename second (udevadm test shows that order). NAME_FALLBACK
// names devices with an onboard index or a PCI function; rxe and siw have
// neither (their sysfs devices are virtual, even on a PCI NIC's netdev), so
// rdma_rename leaves them and rdmatool names them: by names.conf, else by
// GUID (rdma-core's NAME_GUID), except that from 6.11 the name `rdma link
// add` gave is user space's and kept. The lab's rxe0 and siw0 are mapped
// to their own names, so the lab keeps them on every boot.
func TestSystemUdevNames(t *testing.T) {
	vmtest.RequireSystem(t, vmtest.RXE, vmtest.SIW)
	userNamed := vmtest.Fact(t, "rdma link add names are user-assigned")
	guids := map[string]string{} // kernel name -> node GUID
	for _, d := range []string{"rxe0", "siw0"} {
		guids[d] = readGUID(t, d)
	}
	// What the test made goes when it ends, unless it ends to reboot
	// (vmtest.Reboot skips it).
	t.Cleanup(func() {
		if !t.Skipped() {
			removeUdevTest(t)
		}
	})
	switch vmtest.Boot(t) {
	case 1:
		if b, err := os.ReadFile(debianNamingRuleFile); err != nil || !strings.Contains(string(b), debianNamingRule) {
			t.Fatalf("%s is not Debian's (%v):\n%s", debianNamingRuleFile, err, b)
		}
		aptInstall(t, labDeb(t, "deb/rdmatool_*.deb"))
		// Mapped: the lab's devices (to their names) and one new device.
		names := "# TestSystemUdevNames\n" + guids["rxe0"] + " rxe0\n" + guids["siw0"] + " siw0\n" +
			"0000:00ff:fe00:0401 fab0-rxe\n"
		if err := os.WriteFile("/etc/rdmatool/names.conf", []byte(names), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("/etc/systemd/system/rdmatool-test-links.service", []byte(systemLinks), 0o644); err != nil {
			t.Fatal(err)
		}
		guest(t, "systemctl", "daemon-reload")
		guest(t, "systemctl", "enable", "--now", "rdmatool-test-links.service")
		guest(t, "udevadm", "settle", "--timeout=60")
		got := namesByGUID(t)
		want := map[string]string{
			guids["rxe0"]: "rxe0", guids["siw0"]: "siw0",
			"0000:00ff:fe00:0401": "fab0-rxe", "0000:00ff:fe00:0501": "rocex000000fffe000501",
		}
		if userNamed {
			want["0000:00ff:fe00:0401"], want["0000:00ff:fe00:0501"] = "labrxe2", "labrxe3"
		}
		for guid, name := range want {
			if got[guid] != name {
				t.Errorf("after rdma link add: the device with node GUID %s is %q, want %q (user-assigned names kept: %v)",
					guid, got[guid], name, userNamed)
			}
		}
		// rdma-core's PROGRAM runs while the rules are read, rdmatool's
		// RUN after all of them.
		name := want["0000:00ff:fe00:0401"]
		out := guest(t, "udevadm", "test", "--action=add", "/sys/class/infiniband/"+name)
		program := strings.Index(out, "Running PROGRAM 'rdma_rename "+name+" NAME_FALLBACK'")
		run := strings.Index(out, "run: '/lib/udev/rdmatool-udev-rename -- '"+name+"''")
		if program < 0 || run < 0 || program > run {
			t.Errorf("udevadm test: rdma-core's PROGRAM at %d, rdmatool's RUN at %d; want both, rdma-core's first:\n%s", program, run, out)
		}
		if log := guest(t, "journalctl", "-b", "-u", "systemd-udevd", "-o", "cat", "--no-pager"); strings.Contains(log, "rdmatool") &&
			strings.Contains(log, "failed with exit code") {
			t.Errorf("rdmatool failed under udev:\n%s", log)
		}
		saveNames(t, udevNames{ByGUID: got})
		vmtest.Reboot(t)
	case 2:
		before := loadNames(t)
		// The unit made the devices at boot; udev has named them.
		var got map[string]string
		waitFor(t, 60*time.Second, "the devices of boot 1 under their names", func() bool {
			guest(t, "udevadm", "settle", "--timeout=60")
			got = namesByGUID(t)
			for guid, name := range before.ByGUID {
				if got[guid] != name {
					return false
				}
			}
			return true
		}, func() string {
			return "boot 1: " + mapString(before.ByGUID) + "\nboot 2: " + mapString(got)
		})
	}
}

// removeUdevTest removes the devices, files and package of
// TestSystemUdevNames.
func removeUdevTest(t *testing.T) {
	guestErr("systemctl", "disable", "--now", "rdmatool-test-links.service")
	for _, guid := range []string{"0000:00ff:fe00:0401", "0000:00ff:fe00:0501"} {
		if name := namesByGUID(t)[guid]; name != "" {
			guestErr("rdma", "link", "delete", name)
		}
	}
	guestErr("ip", "link", "del", "dummy2")
	guestErr("ip", "link", "del", "dummy3")
	os.Remove("/etc/systemd/system/rdmatool-test-links.service")
	os.Remove("/etc/rdmatool/names.conf")
	os.RemoveAll(filepath.Dir(udevNamesFile))
	guestErr("apt-get", "purge", "-y", "rdmatool")
	guestErr("systemctl", "daemon-reload")
}

// readGUID is a device's node GUID as sysfs shows it.
func readGUID(t *testing.T, dev string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, "node_guid"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// namesByGUID maps each RDMA device's node GUID to its name.
func namesByGUID(t *testing.T) map[string]string {
	t.Helper()
	devs, err := os.ReadDir("/sys/class/infiniband")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", d.Name(), "node_guid"))
		if err == nil {
			m[strings.TrimSpace(string(b))] = d.Name()
		}
	}
	return m
}

func mapString(m map[string]string) string {
	b, _ := json.Marshal(m)
	return string(b)
}

func saveNames(t *testing.T, n udevNames) {
	t.Helper()
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(udevNamesFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(udevNamesFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadNames(t *testing.T) udevNames {
	t.Helper()
	var n udevNames
	b, err := os.ReadFile(udevNamesFile)
	if err != nil {
		t.Fatalf("the names boot 1 saw: %v", err)
	}
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
