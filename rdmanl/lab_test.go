package rdmanl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/rdmatool/rdmatool/vmtest"
)

// Lab tests: they run inside the vmtest guest on every kernel of the matrix
// (make test-lab) and skip elsewhere.

func labClient(t *testing.T) *Client {
	t.Helper()
	c, err := Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func labDevice(t *testing.T, c *Client, name vmtest.Device) Device {
	t.Helper()
	d, err := c.Device(t.Context(), string(name))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startLabWorkloads holds RC pairs on both devices and QPs on an SRQ with
// gaps in its QP numbers, and returns the workloads' QPs by device and QPN.
func startLabWorkloads(t *testing.T) map[string]map[uint32]vmtest.Event {
	t.Helper()
	runs := [][]string{
		{"--dev", "rxe0", "--pairs", "--qps", "2", "--to", "RTS"},
		{"--dev", "rxe0", "--qps", "8", "--srq-every", "2", "--to", "INIT"},
		{"--dev", "rxe0", "--qps", "2", "--srq", "--to", "ERR"},
		{"--dev", "siw0", "--pairs", "--qps", "1", "--srq", "--connect", "cm", "--addr", vmtest.SIWAddr, "--to", "RTS"},
	}
	qps := map[string]map[uint32]vmtest.Event{"rxe0": {}, "siw0": {}}
	for _, args := range runs {
		w := vmtest.StartWorkload(t, append(args, "--hold", "stdin")...)
		w.WaitFor("ready", 30*time.Second)
		for _, q := range w.QPs() {
			qps[q.Dev][q.QPN] = q
		}
		t.Cleanup(func() { w.Release(30 * time.Second) })
	}
	return qps
}

// runJSON runs a command and decodes its JSON array of objects.
func runJSON(t *testing.T, name string, args ...string) []map[string]any {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, stderr.String())
	}
	var v []map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return v
}

func TestLabQPsMatchIproute2(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	made := startLabWorkloads(t)
	ours := runJSON(t, vmtest.Bin(t, "rdmatool"), "res", "qp", "-j")
	theirs := runJSON(t, "rdma", "-j", "res", "show", "qp")

	key := func(o map[string]any) string { return fmt.Sprintf("%v/%v", o["ifname"], o["lqpn"]) }
	byKey := map[string]map[string]any{}
	for _, o := range ours {
		if _, dup := byKey[key(o)]; dup {
			t.Errorf("rdmatool lists QP %s twice", key(o))
		}
		byKey[key(o)] = o
	}
	seen := map[string]bool{}
	for _, o := range theirs {
		k := key(o)
		if seen[k] {
			continue // iproute2 lists port-less QPs once per query
		}
		seen[k] = true
		got, ok := byKey[k]
		if !ok {
			t.Errorf("QP %s is in rdma res show qp but not in rdmatool res qp: %v", k, o)
			continue
		}
		for field, want := range o {
			field = strings.ReplaceAll(field, "-", "_")
			if got[field] != want {
				t.Errorf("QP %s: %s = %v, iproute2 says %v", k, field, got[field], want)
			}
		}
	}
	for k := range byKey {
		if !seen[k] {
			t.Errorf("QP %s is in rdmatool res qp but not in rdma res show qp", k)
		}
	}

	// The SRQ join: every workload QP on an SRQ carries that SRQ's number,
	// the others none, checked against iproute2's SRQ listing.
	srqOf := map[string]float64{}
	for _, s := range runJSON(t, "rdma", "-j", "res", "show", "srq") {
		ranges, _ := s["lqpn"].([]any) // iproute2: ["17-18", "20"]
		for _, rv := range ranges {
			r, _ := rv.(string)
			var lo, hi uint32
			if n, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); n == 1 {
				hi = lo
			}
			for q := lo; q <= hi && lo != 0; q++ {
				srqOf[fmt.Sprintf("%v/%d", s["ifname"], q)] = s["srqn"].(float64)
			}
		}
	}
	onSRQ := 0
	for dev, qps := range made {
		for qpn, ev := range qps {
			k := fmt.Sprintf("%s/%d", dev, qpn)
			got, ok := byKey[k]
			if !ok {
				t.Errorf("workload QP %s missing from rdmatool res qp", k)
				continue
			}
			srqn, listed := srqOf[k]
			onWorkloadSRQ := strings.Contains(ev.Raw, `"srq":true`)
			if onWorkloadSRQ != listed {
				t.Errorf("QP %s: workload says on SRQ %v, rdma res show srq says %v", k, onWorkloadSRQ, listed)
			}
			if got["srq"] != onWorkloadSRQ {
				t.Errorf("QP %s: srq = %v, want %v", k, got["srq"], onWorkloadSRQ)
			}
			if onWorkloadSRQ {
				onSRQ++
				if got["srqn"] != srqn {
					t.Errorf("QP %s: srqn = %v, want %v", k, got["srqn"], srqn)
				}
			}
		}
	}
	if onSRQ < 8 {
		t.Errorf("only %d workload QPs on SRQs; the scenario makes at least 8", onSRQ)
	}
}

func TestLabSRQRanges(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	c := labClient(t)
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "9", "--srq-every", "3", "--to", "INIT", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	defer w.Release(30 * time.Second)
	var want []uint32
	for _, q := range w.QPs() {
		if strings.Contains(q.Raw, `"srq":true`) {
			want = append(want, q.QPN)
		}
	}
	var got []uint32
	for s, err := range c.SRQs(t.Context(), labDevice(t, c, vmtest.RXE), DumpOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if s.Owner.PID != uint32(w.PID()) {
			continue
		}
		for _, r := range s.QPs {
			for q := r.Min; q <= r.Max; q++ {
				got = append(got, q)
			}
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("SRQ QPs = %v, want %v (every third QP of the workload)", got, want)
	}
}

func TestLabRenameAndLinks(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	ctx := t.Context()
	c := labClient(t)
	if out, err := exec.Command("ip", "link", "add", "name", "labnet0", "address", "02:00:00:00:09:01", "type", "dummy").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", "labnet0").Run() })
	exec.Command("ip", "link", "set", "labnet0", "up").Run()

	if err := c.LinkAdd(ctx, "labrxe0", "rxe", "labnet0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d, err := c.Device(context.Background(), "labrxe9"); err == nil {
			c.LinkDelete(context.Background(), d)
		}
	})
	dev, err := c.Device(ctx, "labrxe0")
	if err != nil {
		t.Fatalf("new device not listed: %v", err)
	}
	if want := GUID(0x000000fffe000901); dev.NodeGUID != want {
		t.Errorf("node GUID = %s, want %s (from the fixed MAC)", dev.NodeGUID, want)
	}
	if err := c.Rename(ctx, dev, "labrxe9"); err != nil {
		t.Fatalf("rename: %v", err)
	}
	renamed, err := c.Device(ctx, "labrxe9")
	if err != nil || renamed.Index != dev.Index {
		t.Fatalf("after rename: %+v, %v; want index %d under the new name", renamed, err, dev.Index)
	}
	if _, err := c.Device(ctx, "labrxe0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("old name still resolves: %v", err)
	}

	err = c.Rename(ctx, renamed, "rxe0")
	if !errors.Is(err, os.ErrExist) {
		t.Fatalf("rename to a taken name: %v, want an error matching os.ErrExist", err)
	}
	if got := err.Error(); !strings.Contains(got, "rename labrxe9 to rxe0") || !strings.Contains(got, "file exists") {
		t.Errorf("error %q does not name the rename and the cause", got)
	}
	out, _ := exec.Command(vmtest.Bin(t, "rdmatool"), "link", "add", "rxe0", "type", "rxe", "netdev", "labnet0").CombinedOutput()
	if !strings.Contains(string(out), "rdmatool: ") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("duplicate link add: want one clear error line, got %q", out)
	}
	if err := c.LinkDelete(ctx, renamed); err != nil {
		t.Fatalf("link delete: %v", err)
	}
	if _, err := c.Device(ctx, "labrxe9"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("deleted device still listed: %v", err)
	}
}

func TestLabDeviceDeletedDuringDump(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	if out, err := exec.Command("sh", "-c", "ip link add name labnet1 address 02:00:00:00:09:02 type dummy && ip link set labnet1 up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", "labnet1").Run() })
	c := labClient(t)
	if err := c.LinkAdd(t.Context(), "labrxe1", "rxe", "labnet1"); err != nil {
		t.Fatal(err)
	}
	dev := labDevice(t, c, "labrxe1")
	w := vmtest.StartWorkload(t, "--dev", "labrxe1", "--qps", "2000", "--batch", "--quiet", "--hold", "stdin")
	w.WaitFor("ready", 120*time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	deleted := make(chan error, 1)
	var got []QP
	var dumpErr error
	for qp, err := range c.QPs(ctx, dev, DumpOptions{NoSRQJoin: true}) {
		if err != nil {
			dumpErr = err
			break
		}
		if len(got) == 0 {
			// Delete the device under the running dump: the workload's
			// contexts must close before rxe can unregister. The dump
			// waits between two of its messages until the device is
			// gone, so what the kernel sends next is about a deleted
			// device.
			go func() {
				d, err := Dial()
				if err != nil {
					deleted <- err
					return
				}
				defer d.Close()
				w.Release(60 * time.Second)
				deleted <- d.LinkDelete(context.Background(), dev)
			}()
			select {
			case err := <-deleted:
				if err != nil {
					t.Fatalf("link delete: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("the device was not deleted within 60s")
			}
		}
		got = append(got, qp)
	}
	if ctx.Err() != nil {
		t.Fatalf("dump did not end within 60s after the device was deleted (%d QPs)", len(got))
	}
	t.Logf("dump under deletion: %d of 2000 QPs, err %v", len(got), dumpErr)
	// A dump cut short by the deletion must say so, never end as if the
	// device had only the QPs seen so far.
	if len(got) < 2000 && (dumpErr == nil || !errors.Is(dumpErr, ErrNoDevice) || !strings.HasPrefix(dumpErr.Error(), "rdmanl: dump QPs of labrxe1: ")) {
		t.Errorf("a dump cut short after %d QPs ended with error %v, want \"rdmanl: dump QPs of labrxe1: ...\" matching ErrNoDevice", len(got), dumpErr)
	}
	seen := map[uint32]bool{}
	for _, q := range got {
		if seen[q.LQPN] || q.DevName != "labrxe1" {
			t.Errorf("bad entry in partial result: %+v", q)
		}
		seen[q.LQPN] = true
	}
	// After the dump the device is gone, and asking for it says so.
	if _, err := c.Device(t.Context(), "labrxe1"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("device after delete: %v", err)
	}
	for _, err := range c.QPs(t.Context(), dev, DumpOptions{NoSRQJoin: true}) {
		if err == nil {
			t.Errorf("dump of a deleted device returned QPs")
		}
		break
	}
}

// TestLabRecord records the kernel's replies as golden files when run with
// -update inside the lab (make golden-rdmanl), and otherwise checks that the
// recorded requests still decode against the live kernel.
func TestLabRecord(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	startLabWorkloads(t)
	// A QP dump that spans several 32 KiB messages: 1000 QPs on one SRQ.
	big := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "1000", "--srq", "--to", "INIT", "--batch", "--quiet", "--hold", "stdin")
	big.WaitFor("ready", 120*time.Second)
	defer big.Release(60 * time.Second)

	kernel := vmtest.Kernel()
	record := func(name, provider string, op uint16, flags netlink.HeaderFlags, attrs []byte) []netlink.Message {
		t.Helper()
		msgs, err := c.c.Execute(netlink.Message{
			Header: netlink.Header{Type: msgType(op), Flags: netlink.Request | flags},
			Data:   attrs,
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if *update {
			writeRecorded(t, filepath.Join("testdata", recordedName(name, kernel, provider)), msgs)
		}
		return msgs
	}
	record("dev-dump", "", cmdGet, netlink.Dump, nil)
	record("sys-get", "", cmdSysGet, 0, nil)
	record("res-summary", "", cmdResGet, netlink.Dump, nil)
	for _, name := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		d := labDevice(t, c, name)
		devAttrs := encode(func(ae *netlink.AttributeEncoder) {
			ae.Uint32(attrDevIndex, d.Index)
			ae.Uint8(attrDriverDetails, 1)
		})
		provider := strings.TrimSuffix(string(name), "0") // rxe, siw
		record("port-dump", provider, cmdPortGet, netlink.Dump, encode(func(ae *netlink.AttributeEncoder) { ae.Uint32(attrDevIndex, d.Index) }))
		for _, r := range []struct {
			name string
			op   uint16
		}{
			{"qp-dump", cmdResQPGet}, {"srq-dump", cmdResSRQGet}, {"cq-dump", cmdResCQGet},
			{"mr-dump", cmdResMRGet}, {"pd-dump", cmdResPDGet}, {"ctx-dump", cmdResCtxGet}, {"cm_id-dump", cmdResCMIDGet},
		} {
			msgs := record(r.name, provider, r.op, netlink.Dump, devAttrs)
			if r.op == cmdResQPGet && name == vmtest.RXE && len(msgs) < 2 {
				t.Errorf("QP dump of rxe0 fit in %d message; the recording should span several", len(msgs))
			}
		}
	}
}

// One device's summary (the doit) says what that device's entry in the
// dump of every device's says, with a workload holding QPs on rxe0; a
// device that is not there is ErrNoDevice.
func TestLabSummaryOfOneDevice(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "3", "--to", "INIT", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	all, err := c.Summaries(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		dev := labDevice(t, c, name)
		one, err := c.Summary(t.Context(), dev)
		if err != nil {
			t.Fatalf("Summary(%s): %v", dev.Name, err)
		}
		i := slices.IndexFunc(all, func(s Summary) bool { return s.DevIndex == dev.Index })
		if i < 0 || !reflect.DeepEqual(one, all[i]) {
			t.Errorf("Summary(%s) = %+v, the dump has %+v", dev.Name, one, all)
		}
		if name == vmtest.RXE {
			if qps := slices.IndexFunc(one.Counts, func(r ResourceCount) bool { return r.Name == "qp" && r.Current >= 3 }); qps < 0 {
				t.Errorf("rxe0's summary counts fewer QPs than the workload holds: %+v", one.Counts)
			}
		}
	}
	_, err = c.Summary(t.Context(), Device{Index: 9999, Name: "gone0"})
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("Summary of a missing device: %v, want ErrNoDevice", err)
	}
	w.Release(30 * time.Second)
}
