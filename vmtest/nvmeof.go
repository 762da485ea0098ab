package vmtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NVMeoFOptions configures StartNVMeoF.
type NVMeoFOptions struct {
	// Device carries the connection: RXE (RoCE) or SIW (iWARP).
	Device Device
	// UseSRQ loads nvmet_rdma with use_srq=1: the target's queues then
	// receive on shared receive queues (one per completion vector).
	UseSRQ bool
	// IOQueues is the number of I/O queues the host asks for (0: 2).
	IOQueues int
}

// NVMeoF is an NVMe over Fabrics (RDMA) target and a host connected to it
// inside the guest: nvmet-rdma exports a null_blk device through configfs,
// nvme-rdma connects through /dev/nvme-fabrics (no nvme-cli). The target
// and the host are kernel ULPs; their QPs are kernel QPs created through
// rdma_cm.
type NVMeoF struct {
	opts NVMeoFOptions
	// NQN is the subsystem's NVMe qualified name; TrSvcID its port.
	NQN     string
	TrSvcID string
	// Ctrl is the host's controller ("nvme0"), Namespace the block device
	// of namespace 1 ("/dev/nvme0n1"), Queues the queues connected (admin
	// and I/O).
	Ctrl      string
	Namespace string
	Queues    int

	portDir, subsysDir, linkPath string
	connected, linked            bool
}

const (
	nvmetRoot   = "/sys/kernel/config/nvmet"
	nvmetPortID = "1"
	nvmeofPort  = "4420"
)

// StartNVMeoF sets up the target on opts.Device's address (loading
// nvmet_rdma again when its use_srq differs), connects the host and waits
// for the namespace's block device. Everything it made is torn down when
// the test ends, if the test has not done so.
func StartNVMeoF(t testing.TB, opts NVMeoFOptions) *NVMeoF {
	t.Helper()
	if opts.IOQueues == 0 {
		opts.IOQueues = 2
	}
	n := &NVMeoF{opts: opts, NQN: "nqn.2014-08.org.rdmatool:lab", TrSvcID: nvmeofPort}
	t.Cleanup(func() { n.teardown(t) })
	if err := loadNVMetRDMA(opts.UseSRQ); err != nil {
		t.Fatal(err)
	}
	if err := n.setupTarget(); err != nil {
		t.Fatalf("nvmet target on %s: %v", opts.Device, err)
	}
	if err := n.connect(); err != nil {
		t.Fatalf("nvme-rdma connect to %s:%s: %v", opts.Device.Addr(), n.TrSvcID, err)
	}
	ns, err := n.waitNamespace(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n.Namespace = ns
	return n
}

// loadNVMetRDMA makes sure nvmet_rdma is loaded with use_srq as asked: the
// parameter is read-only (0444), so a different value means unloading it.
func loadNVMetRDMA(useSRQ bool) error {
	want := "N"
	if useSRQ {
		want = "Y"
	}
	cur, err := os.ReadFile("/sys/module/nvmet_rdma/parameters/use_srq")
	if err == nil && strings.TrimSpace(string(cur)) == want {
		return nil
	}
	if err == nil {
		if out, err := exec.Command("modprobe", "-r", "nvmet_rdma").CombinedOutput(); err != nil {
			return fmt.Errorf("modprobe -r nvmet_rdma: %w: %s", err, out)
		}
	}
	arg := "use_srq=0"
	if useSRQ {
		arg = "use_srq=1"
	}
	if out, err := exec.Command("modprobe", "nvmet_rdma", arg).CombinedOutput(); err != nil {
		return fmt.Errorf("modprobe nvmet_rdma %s: %w: %s", arg, err, out)
	}
	got, err := os.ReadFile("/sys/module/nvmet_rdma/parameters/use_srq")
	if err != nil || strings.TrimSpace(string(got)) != want {
		return fmt.Errorf("nvmet_rdma use_srq is %q after loading it with %s (%w)", strings.TrimSpace(string(got)), arg, err)
	}
	return nil
}

func writeAttr(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

// setupTarget makes the subsystem (any host allowed), its namespace 1 on
// /dev/nullb0, and an RDMA port on the device's address.
func (n *NVMeoF) setupTarget() error {
	if _, err := os.Stat(nvmetRoot); err != nil {
		if err := unix.Mount("configfs", "/sys/kernel/config", "configfs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount configfs: %w", err)
		}
	}
	n.subsysDir = filepath.Join(nvmetRoot, "subsystems", n.NQN)
	if err := os.Mkdir(n.subsysDir, 0o755); err != nil {
		return err
	}
	if err := writeAttr(filepath.Join(n.subsysDir, "attr_allow_any_host"), "1"); err != nil {
		return err
	}
	ns := filepath.Join(n.subsysDir, "namespaces", "1")
	if err := os.Mkdir(ns, 0o755); err != nil {
		return err
	}
	if err := writeAttr(filepath.Join(ns, "device_path"), "/dev/nullb0"); err != nil {
		return err
	}
	if err := writeAttr(filepath.Join(ns, "enable"), "1"); err != nil {
		return err
	}
	n.portDir = filepath.Join(nvmetRoot, "ports", nvmetPortID)
	if err := os.Mkdir(n.portDir, 0o755); err != nil {
		return err
	}
	for attr, v := range map[string]string{"addr_trtype": "rdma", "addr_adrfam": "ipv4",
		"addr_traddr": n.opts.Device.Addr(), "addr_trsvcid": n.TrSvcID} {
		if err := writeAttr(filepath.Join(n.portDir, attr), v); err != nil {
			return err
		}
	}
	// Linking the subsystem into the port enables the port: nvmet_rdma
	// binds its listening rdma_cm ID here.
	n.linkPath = filepath.Join(n.portDir, "subsystems", n.NQN)
	if err := os.Symlink(n.subsysDir, n.linkPath); err != nil {
		return fmt.Errorf("enable port: %w", err)
	}
	n.linked = true
	return nil
}

// connect writes the connect options to /dev/nvme-fabrics, as nvme-cli
// does, and reads back the controller's instance.
func (n *NVMeoF) connect() error {
	f, err := os.OpenFile("/dev/nvme-fabrics", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck // written by one write, whose error is checked
	opts := fmt.Sprintf("transport=rdma,traddr=%s,trsvcid=%s,nqn=%s,nr_io_queues=%d",
		n.opts.Device.Addr(), n.TrSvcID, n.NQN, n.opts.IOQueues)
	if _, err := f.Write([]byte(opts)); err != nil {
		return fmt.Errorf("write %q: %w", opts, err)
	}
	buf := make([]byte, 256)
	k, err := f.Read(buf)
	if err != nil {
		return fmt.Errorf("read the new controller: %w", err)
	}
	// "instance=0,cntlid=1"
	for kv := range strings.SplitSeq(strings.TrimSpace(string(buf[:k])), ",") {
		if v, ok := strings.CutPrefix(kv, "instance="); ok {
			n.Ctrl = "nvme" + v
		}
	}
	if n.Ctrl == "" {
		return fmt.Errorf("/dev/nvme-fabrics answered %q: no instance", buf[:k])
	}
	n.connected = true
	q, err := os.ReadFile(filepath.Join("/sys/class/nvme", n.Ctrl, "queue_count"))
	if err == nil {
		n.Queues, _ = strconv.Atoi(strings.TrimSpace(string(q)))
	}
	return nil
}

var headName = regexp.MustCompile(`^nvme\d+n1$`)

// waitNamespace waits for namespace 1's block device: the head in the
// controller's subsystem with native multipath (Debian's default), else the
// controller's own. Sysfs sends no notification a test can await, so it
// polls.
func (n *NVMeoF) waitNamespace(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if name := n.findNamespace(); name != "" {
			if _, err := os.Stat("/dev/" + name); err == nil {
				return "/dev/" + name, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("namespace 1 of %s has no block device after %s", n.Ctrl, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *NVMeoF) findNamespace() string {
	subsystems, _ := filepath.Glob("/sys/class/nvme-subsystem/*/" + n.Ctrl)
	for _, s := range subsystems {
		ents, _ := os.ReadDir(filepath.Dir(s))
		for _, e := range ents {
			if headName.MatchString(e.Name()) {
				return e.Name()
			}
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/nvme", n.Ctrl, n.Ctrl+"n1")); err == nil {
		return n.Ctrl + "n1"
	}
	return ""
}

// IO writes and reads blocks of the namespace with O_DIRECT, so they go
// through the NVMe-oF queues, and returns the bytes moved. It fails t on
// any error or short transfer.
func (n *NVMeoF) IO(t testing.TB, blocks int) int {
	t.Helper()
	fd, err := unix.Open(n.Namespace, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", n.Namespace, err)
	}
	defer unix.Close(fd)
	const bs = 4096
	// O_DIRECT wants an aligned buffer: an anonymous mapping is page aligned.
	buf, err := unix.Mmap(-1, 0, bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	moved := 0
	for i := range blocks {
		for j := range buf {
			buf[j] = byte(i + j)
		}
		k, err := unix.Pwrite(fd, buf, int64(i*bs))
		if err != nil || k != bs {
			t.Fatalf("write block %d of %s: %d bytes, %v", i, n.Namespace, k, err)
		}
		moved += k
		k, err = unix.Pread(fd, buf, int64(i*bs))
		if err != nil || k != bs {
			t.Fatalf("read block %d of %s: %d bytes, %v", i, n.Namespace, k, err)
		}
		moved += k
	}
	return moved
}

// Disconnect deletes the host's controller (as nvme disconnect does) and
// returns how long that took. The target then tears its queues down in
// its own work items, draining each QP.
func (n *NVMeoF) Disconnect(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	if err := writeAttr(filepath.Join("/sys/class/nvme", n.Ctrl, "delete_controller"), "1"); err != nil {
		t.Fatal(err)
	}
	n.connected = false
	return time.Since(start)
}

// RemovePort unlinks the subsystem from the port, which disables it, and
// removes the port, and returns how long that took: nvmet waits there
// until every queue of the port's controllers is released, drains
// included.
func (n *NVMeoF) RemovePort(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	if err := os.Remove(n.linkPath); err != nil {
		t.Fatalf("remove port: %v", err)
	}
	n.linked = false
	if err := os.Remove(n.portDir); err != nil {
		t.Fatalf("remove port: %v", err)
	}
	n.portDir = ""
	return time.Since(start)
}

// teardown undoes whatever is left, in reverse order, logging failures.
func (n *NVMeoF) teardown(t testing.TB) {
	if n.connected {
		if err := writeAttr(filepath.Join("/sys/class/nvme", n.Ctrl, "delete_controller"), "1"); err != nil {
			t.Logf("nvmeof cleanup: %v", err)
		}
	}
	if n.linked {
		if err := os.Remove(n.linkPath); err != nil {
			t.Logf("nvmeof cleanup: %v", err)
		}
	}
	for _, dir := range []string{n.portDir, filepath.Join(n.subsysDir, "namespaces", "1"), n.subsysDir} {
		if n.subsysDir == "" || dir == "" {
			continue
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Logf("nvmeof cleanup: %v", err)
		}
	}
}
