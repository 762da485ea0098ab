package sysfs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/vmtest"
)

// readSys reads a sysfs attribute in the guest, trimmed.
func readSys(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// labRdmatool runs the lab's rdmatool binary and returns its stdout,
// failing t when it does not exit 0.
func labRdmatool(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rdmatool %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// The JSON of `rdmatool dev show -d -j`, with its keys written out here:
// they are API.
type devDetailsJSON struct {
	Devices []struct {
		IfName    string    `json:"ifname"`
		NodeGUID  string    `json:"node_guid"`
		PCI       *struct{} `json:"pci"`
		Uverbs    string    `json:"uverbs"`
		UverbsDev string    `json:"uverbs_dev"`
		PortInfo  []struct {
			Port       uint32            `json:"port"`
			State      string            `json:"state"`
			PhysState  string            `json:"physical_state"`
			RateGbps   float64           `json:"rate_gbps"`
			LinkLayer  string            `json:"link_layer"`
			Netdev     string            `json:"netdev"`
			Counters   map[string]uint64 `json:"counters"`
			HWCounters map[string]uint64 `json:"hw_counters"`
		} `json:"port_info"`
		Holders      []holderJSON `json:"holders"`
		SysfsSkipped []struct {
			Path  string `json:"path"`
			Error string `json:"error"`
		} `json:"sysfs_skipped"`
	} `json:"devices"`
	ZombieContexts []struct {
		PID uint32 `json:"pid"`
	} `json:"zombie_contexts"`
	HoldersUnreadable []uint32 `json:"holders_unreadable"`
}

type holderJSON struct {
	PID         uint32     `json:"pid"`
	Comm        string     `json:"comm"`
	Cgroup      string     `json:"cgroup"`
	ContainerID string     `json:"container_id"`
	QPs         int        `json:"qps"`
	CMIDs       int        `json:"cm_ids"`
	Contexts    int        `json:"contexts"`
	Files       []fileJSON `json:"files"`
}

type fileJSON struct {
	FD   int    `json:"fd"`
	Path string `json:"path"`
}

// TestLabDevShowDetails: `rdmatool dev show -d -j` in the guest, while
// qpwork holds QPs on rxe0, says what sysfs and /proc say, read here on
// their own: GUIDs, ports, netdevs, the uverbs devices, and qpwork (pid,
// comm, QP count, its uverbs fd) as a holder of rxe0 and not of siw0.
func TestLabDevShowDetails(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	const qps = 3
	w := vmtest.StartWorkload(t, "--dev", string(vmtest.RXE), "--qps", strconv.Itoa(qps), "--to", "INIT", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	pid := uint32(w.PID())

	var rep devDetailsJSON
	out := labRdmatool(t, "dev", "show", "-d", "-j")
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("dev show -d -j: %v: %s", err, out)
	}
	// Keys are API: every documented one is there, none null.
	var raw map[string]any
	json.Unmarshal(out, &raw)
	for _, k := range []string{"devices", "zombie_contexts", "holders_unreadable"} {
		if v, ok := raw[k]; !ok || v == nil {
			t.Errorf("dev show -d -j: %q is %v", k, v)
		}
	}
	if len(rep.ZombieContexts) != 0 || len(rep.HoldersUnreadable) != 0 {
		t.Errorf("zombie contexts %+v, unreadable %v; want none as root in the lab", rep.ZombieContexts, rep.HoldersUnreadable)
	}
	byName := map[string]int{}
	for i, d := range rep.Devices {
		byName[d.IfName] = i
	}
	for _, dev := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(string(dev), func(t *testing.T) {
			i, ok := byName[string(dev)]
			if !ok {
				t.Fatalf("%s missing from %s", dev, out)
			}
			d := rep.Devices[i]
			sys := filepath.Join("/sys/class/infiniband", string(dev))
			if d.NodeGUID != readSys(t, filepath.Join(sys, "node_guid")) || d.NodeGUID != dev.NodeGUID() {
				t.Errorf("node_guid %s; sysfs %s, lab %s", d.NodeGUID, readSys(t, filepath.Join(sys, "node_guid")), dev.NodeGUID())
			}
			if d.PCI != nil {
				t.Errorf("pci %+v; a software device has none", d.PCI)
			}
			ports, _ := os.ReadDir(filepath.Join(sys, "ports"))
			if len(d.PortInfo) != len(ports) || len(ports) == 0 {
				t.Fatalf("port_info %+v; sysfs has %d ports", d.PortInfo, len(ports))
			}
			p := d.PortInfo[0]
			port := filepath.Join(sys, "ports", "1")
			// "4: ACTIVE" in sysfs; netlink's words in rdmatool.
			if id, name, _ := strings.Cut(readSys(t, filepath.Join(port, "state")), ": "); p.State != name || id != "4" {
				t.Errorf("port 1 state %s; sysfs %s: %s", p.State, id, name)
			}
			if id, _, _ := strings.Cut(readSys(t, filepath.Join(port, "phys_state")), ": "); id != "5" || p.PhysState != "LINK_UP" {
				t.Errorf("port 1 physical_state %s; sysfs %s", p.PhysState, readSys(t, filepath.Join(port, "phys_state")))
			}
			rate, _, _ := strings.Cut(readSys(t, filepath.Join(port, "rate")), " ")
			if strconv.FormatFloat(p.RateGbps, 'f', -1, 64) != rate {
				t.Errorf("port 1 rate_gbps %v; sysfs %q", p.RateGbps, readSys(t, filepath.Join(port, "rate")))
			}
			if p.LinkLayer != readSys(t, filepath.Join(port, "link_layer")) {
				t.Errorf("port 1 link_layer %s; sysfs %s", p.LinkLayer, readSys(t, filepath.Join(port, "link_layer")))
			}
			wantNetdev := map[vmtest.Device]string{vmtest.RXE: "dummy0", vmtest.SIW: "dummy1"}[dev]
			if p.Netdev != wantNetdev || readSys(t, filepath.Join(port, "gid_attrs/ndevs/0")) != wantNetdev {
				t.Errorf("port 1 netdev %q; want %s (sysfs gid 0: %s)", p.Netdev, wantNetdev, readSys(t, filepath.Join(port, "gid_attrs/ndevs/0")))
			}
			// Every readable hw counter, by name (rxe has them, siw none).
			files, _ := os.ReadDir(filepath.Join(port, "hw_counters"))
			var names []string
			for _, f := range files {
				if f.Type().IsRegular() {
					names = append(names, f.Name())
				}
			}
			var got []string
			for k := range p.HWCounters {
				got = append(got, k)
			}
			slices.Sort(got)
			if !slices.Equal(got, names) || (dev == vmtest.RXE && len(names) == 0) {
				t.Errorf("hw_counters %v; sysfs has %v", got, names)
			}
			if len(d.SysfsSkipped) != 0 {
				t.Errorf("sysfs_skipped %+v", d.SysfsSkipped)
			}
			// The uverbs device, from /sys/class/infiniband_verbs.
			uverbs, _ := filepath.Glob("/sys/class/infiniband_verbs/uverbs*")
			var wantUverbs, wantDev string
			for _, u := range uverbs {
				if readSys(t, filepath.Join(u, "ibdev")) == string(dev) {
					wantUverbs, wantDev = filepath.Base(u), readSys(t, filepath.Join(u, "dev"))
				}
			}
			if d.Uverbs != wantUverbs || d.UverbsDev != wantDev || wantUverbs == "" {
				t.Errorf("uverbs %s (%s); sysfs says %s (%s)", d.Uverbs, d.UverbsDev, wantUverbs, wantDev)
			}
			i = slices.IndexFunc(d.Holders, func(h holderJSON) bool { return h.PID == pid })
			if dev == vmtest.SIW {
				if i >= 0 {
					t.Errorf("qpwork (pid %d, on rxe0) listed as a holder of siw0: %+v", pid, d.Holders[i])
				}
				return
			}
			if i < 0 {
				t.Fatalf("qpwork (pid %d) not among the holders of rxe0: %+v", pid, d.Holders)
			}
			h := d.Holders[i]
			comm := readSys(t, fmt.Sprintf("/proc/%d/comm", pid))
			if h.Comm != comm || comm != "qpwork" || h.QPs != qps || h.Contexts != 1 {
				t.Errorf("holder %+v; want comm %s, %d QPs, 1 context", h, comm, qps)
			}
			// Its uverbs fd, as /proc/PID/fd says.
			var fds []fileJSON
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			for _, e := range ents {
				target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
				if target == "/dev/infiniband/"+wantUverbs {
					fd, _ := strconv.Atoi(e.Name())
					fds = append(fds, fileJSON{FD: fd, Path: target})
				}
			}
			if !slices.Equal(h.Files, fds) || len(fds) == 0 {
				t.Errorf("holder files %+v; /proc/%d/fd has %+v", h.Files, pid, fds)
			}
		})
	}

	// The text says the same about rxe0, readably.
	text := string(labRdmatool(t, "dev", "show", "-d", string(vmtest.RXE)))
	for _, want := range []string{
		"uverbs " + rep.Devices[byName["rxe0"]].Uverbs + " (" + rep.Devices[byName["rxe0"]].UverbsDev + ") pci none",
		"port 1 state ACTIVE physical-state LINK_UP rate ",
		"netdev dummy0",
		fmt.Sprintf("holder pid %d comm qpwork qps %d cm-ids 0 contexts 1", pid, qps),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dev show -d rxe0:\n%s\nwant %q in it", text, want)
		}
	}
	if strings.Contains(text, "siw0") {
		t.Errorf("dev show -d rxe0 shows siw0:\n%s", text)
	}

	// Unprivileged, root's fd tables cannot be read: qpwork is still a
	// holder of rxe0 by its QPs (netlink), without its files, and is
	// counted as unreadable, so no one concludes there are no holders.
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), "dev", "show", "-d", "-j", string(vmtest.RXE))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dev show -d -j as nobody: %v", err)
	}
	var unpriv devDetailsJSON
	if err := json.Unmarshal(out, &unpriv); err != nil || len(unpriv.Devices) != 1 {
		t.Fatalf("dev show -d -j rxe0 as nobody: %v: %s", err, out)
	}
	if !slices.Contains(unpriv.HoldersUnreadable, pid) {
		t.Errorf("as nobody, holders_unreadable %v lacks qpwork's pid %d", unpriv.HoldersUnreadable, pid)
	}
	hs := unpriv.Devices[0].Holders
	if i := slices.IndexFunc(hs, func(h holderJSON) bool { return h.PID == pid }); i < 0 || hs[i].QPs != qps || hs[i].Comm != "qpwork" || len(hs[i].Files) != 0 {
		t.Errorf("as nobody, holders of rxe0 %+v; want qpwork (pid %d) by its %d QPs, no files", hs, pid, qps)
	}
	w.Release(30 * time.Second)
}
