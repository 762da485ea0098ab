package reset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/sysfs"
	"golang.org/x/sys/unix"
)

// Method is a way of resetting a device. The names are API.
type Method string

// Methods.
const (
	// MethodAuto picks the device's first offered method in the order
	// relink, devlink-reload, pci-reset, unbind.
	MethodAuto Method = "auto"
	// MethodRelink removes a software device (rxe, siw) with DELLINK and
	// adds it again with NEWLINK on the same netdev under the same name.
	MethodRelink Method = "relink"
	// MethodDevlinkReload asks the driver of the device (for a software
	// device, of its netdev) to re-initialise through devlink reload
	// (driver_reinit); a software device is re-created on the netdev that
	// comes back.
	MethodDevlinkReload Method = "devlink-reload"
	// MethodUnbind unbinds the PCI function's driver through sysfs and
	// binds it again. For a software device, the function behind its
	// netdev; the software device is re-created on the function's netdev.
	MethodUnbind Method = "unbind"
	// MethodPCIReset is MethodUnbind with a function reset in between
	// (sysfs reset; FLR first where the function offers it).
	MethodPCIReset Method = "pci-reset"
	// MethodNetdevBounce sets the port's netdev down and up again: the
	// ports go down and up and QPs survive (RoCE and iWARP only).
	MethodNetdevBounce Method = "netdev-bounce"
)

// methods are the methods by name, in the order auto tries them.
var methods = []Method{MethodRelink, MethodDevlinkReload, MethodPCIReset, MethodUnbind, MethodNetdevBounce}

// Methods returns the methods a reset may use, in the order auto tries
// them (MethodAuto is not one of them: it chooses one).
func Methods() []Method { return slices.Clone(methods) }

// ParseMethod parses a method name. An unknown one is a *MethodError.
func ParseMethod(s string) (Method, error) {
	m := Method(s)
	if m == MethodAuto || slices.Contains(methods, m) {
		return m, nil
	}
	names := []string{string(MethodAuto)}
	for _, m := range methods {
		names = append(names, string(m))
	}
	return "", &MethodError{Method: s, Err: fmt.Errorf("unknown method %s (want one of %s)", quote.String(s), strings.Join(names, ", "))}
}

// MethodError is a method name ParseMethod does not know: Method as given,
// and Err why, without the package's prefix, for a caller that names the
// setting its own way.
type MethodError struct {
	Method string
	Err    error
}

func (e *MethodError) Error() string { return "reset: " + e.Err.Error() }
func (e *MethodError) Unwrap() error { return e.Err }

// Options say which device to reset and how.
type Options struct {
	Device  string
	Method  Method        // "" means MethodAuto
	Grace   time.Duration // wait up to this long for holders to close first
	Timeout time.Duration // the reset itself (from the removal until the device is back); must be > 0
	// DryRun and !Yes both only inspect: Run returns the plan.
	DryRun bool
	Yes    bool
	// Rename chooses the persistent name to re-apply: its Policies and
	// MapFile (Devices, All, DryRun and Force are set by Run).
	Rename rename.Options
	// Helper is the command line that runs RunHelper in a new process
	// (the rdmatool binary and its hidden helper command). Required unless
	// DryRun or !Yes.
	Helper []string
	// Observe, when set, reports the kernel's device events (the probes)
	// during the reset; without it Run polls netlink.
	Observe Observer
	// Who is the operator for the audit record ("uid 0 (root)").
	Who     string
	SysRoot string // "" means /sys
	// ProcRoot is where holders are looked up; "" means /proc.
	ProcRoot string
	// LogDir is where the helper writes its log; "" means /run/rdmatool.
	LogDir string
	Log    *slog.Logger // nil discards
}

// ErrHolders is matched by the error Run returns when the reset could not
// finish in time because processes still hold the device.
var ErrHolders = errors.New("holders still hold the device")

// ErrNotConfirmed is matched by the error Run returns without Options.Yes.
var ErrNotConfirmed = errors.New("not confirmed")

// Check validates o without any kernel call.
func Check(o Options) error {
	if o.Device == "" {
		return errors.New("reset: no device given")
	}
	if o.Method != "" {
		if _, err := ParseMethod(string(o.Method)); err != nil {
			return err
		}
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("reset: timeout %s: must be more than 0", o.Timeout)
	}
	if o.Grace < 0 {
		return fmt.Errorf("reset: grace %s: must not be negative", o.Grace)
	}
	if o.Yes && !o.DryRun && len(o.Helper) == 0 {
		return errors.New("reset: no helper command to run the removal in")
	}
	return nil
}

// Report is what a reset did, or would do. It is also the audit record.
// JSON field names are API.
type Report struct {
	Time     time.Time   `json:"time"` // when the reset started, UTC
	Who      string      `json:"who"`
	Device   string      `json:"device"`
	Index    uint32      `json:"index"`
	NodeGUID rdmanl.GUID `json:"node_guid"`
	// Kind is "rxe" or "siw" for software devices, "pci" otherwise.
	Kind string `json:"kind"`
	// Netdevs are the ports' netdevs; [] for InfiniBand.
	Netdevs []string `json:"netdevs"`
	// PCI is the PCI function behind the device or its netdev, "" none.
	PCI    string `json:"pci"`
	Driver string `json:"driver"` // the PCI function's driver
	// ResetMethods are the function's kernel reset methods (reset_method).
	ResetMethods []string `json:"reset_methods"`
	Method       Method   `json:"method"`
	Offered      []Method `json:"offered"`
	// Disassociate says whether the provider can cut its users off; a
	// provider that cannot (rxe, siw) makes the removal wait until every
	// holder has closed the device.
	Disassociate bool `json:"disassociate"`
	// What dies with the reset: the user QPs and MRs on the device and the
	// processes that hold it. KernelQPs are re-created with the device.
	QPs        int      `json:"qps"`
	MRs        int      `json:"mrs"`
	KernelQPs  int      `json:"kernel_qps"`
	Holders    []Holder `json:"holders"`
	Unreadable []uint32 `json:"unreadable_pids"` // processes whose fds could not be read
	// PersistentName is the name the rename policies give the device,
	// with the policy; "" when they name it nothing or something else than
	// it is called now (then its current name is restored as is).
	PersistentName string        `json:"persistent_name"`
	NamePolicy     rename.Policy `json:"name_policy"`
	DryRun         bool          `json:"dry_run"`
	// Result is "planned" (dry run, or not confirmed), "done", "waiting"
	// (the helper still waits for holders: see State and Next), or
	// "failed" (see Error, State and Next).
	Result string `json:"result"`
	Error  string `json:"error"`
	// State says what state the device is in when Run returned and Next
	// how to finish or abandon the reset, when it is not "done".
	State string `json:"state"`
	Next  string `json:"next"`
	// WaitingOn are the holders the removal still waited for at the
	// timeout, or that outlived the grace period.
	WaitingOn []Holder `json:"waiting_on"`
	HelperPID int      `json:"helper_pid"` // 0 when none was started
	HelperLog string   `json:"helper_log"`
	// After is the device as it came back; nil until it did.
	After  *After  `json:"after"`
	Events []Event `json:"events"`
	// GraceSeconds is how long Run waited for holders to close;
	// DurationSeconds how long the whole reset took.
	GraceSeconds    float64 `json:"grace_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// After is the device after the reset.
type After struct {
	Device   string      `json:"device"`
	Index    uint32      `json:"index"`
	NodeGUID rdmanl.GUID `json:"node_guid"`
	SameGUID bool        `json:"same_node_guid"`
	Ports    []PortState `json:"ports"`
	// Name is the outcome of re-applying the persistent name; nil when the
	// device had none (its name was restored as is).
	Name *rename.Result `json:"name"`
}

// PortState is a port after the reset; Why says why it is not ACTIVE.
type PortState struct {
	Port      uint32 `json:"port"`
	State     string `json:"state"`
	PhysState string `json:"phys_state"`
	Netdev    string `json:"netdev"`
	Why       string `json:"why"`
}

// Event is a kernel device event seen during the reset.
type Event struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // "device_fatal", "unregister", "register", "rename", "gone", "back"
	Device string    `json:"device"`
	Index  uint32    `json:"index"`
	Source string    `json:"source"` // "probes" or "netlink" (polled)
}

// Observer reports device events as the kernel emits them (the probes).
type Observer interface {
	// Events yields events until ctx ends.
	Events(ctx context.Context) func(yield func(Event, error) bool)
}

func (o Options) sysRoot() string {
	if o.SysRoot == "" {
		return "/sys"
	}
	return o.SysRoot
}

func (o Options) procRoot() string {
	if o.ProcRoot == "" {
		return "/proc"
	}
	return o.ProcRoot
}

func (o Options) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// target is a device and what it sits on.
type target struct {
	dev     rdmanl.Device
	ports   []rdmanl.Port
	kind    string // "rxe", "siw", "pci", "" unknown
	netdev  string // the first port's netdev
	fn      *sysfs.PCIFunction
	offered []Method
	// devDir is the device the RDMA device depends on (its netdev's for
	// rxe and siw); devlink its devlink instance, if it has one.
	devDir  string
	devlink *devlinkHandle
	// uverbs is the device's uverbs character device, when hasUverbs
	// (scanUsage reads it, before the reset: once the removal has begun,
	// sysfs no longer lists it).
	uverbs    owner.DevNum
	hasUverbs bool
}

// softKind says which software provider dev is, from what it reports: rxe
// is RoCE and siw iWARP, and neither has a parent device in sysfs.
func softKind(sysRoot string, dev rdmanl.Device) string {
	if _, err := os.Lstat(filepath.Join(sysRoot, "class", "infiniband", dev.Name, "device")); err == nil {
		return ""
	}
	switch dev.Protocol {
	case "roce":
		return "rxe"
	case "iw":
		return "siw"
	}
	return ""
}

// inspect reads what the device is and which methods it offers.
func inspect(ctx context.Context, c *rdmanl.Client, sysRoot string, name string) (target, error) {
	var t target
	dev, err := c.Device(ctx, name)
	if err != nil {
		return t, err
	}
	t.dev = dev
	if t.ports, err = c.Ports(ctx, dev); err != nil {
		return t, err
	}
	for _, p := range t.ports {
		if p.NetdevName != "" {
			t.netdev = p.NetdevName
			break
		}
	}
	t.kind = softKind(sysRoot, dev)
	var fn sysfs.PCIFunction
	switch {
	case t.kind != "" && t.netdev != "":
		fn, err = sysfs.ReadNetdevPCIFunction(sysRoot, t.netdev)
	case t.kind == "":
		fn, err = sysfs.ReadPCIFunction(sysRoot, name)
		if err == nil {
			t.kind = "pci"
		}
	default:
		err = sysfs.ErrNotPCI
	}
	switch {
	case err == nil:
		t.fn = &fn
	case !errors.Is(err, sysfs.ErrNotPCI):
		return t, fmt.Errorf("reset: %w", err)
	}
	if t.kind == "rxe" || t.kind == "siw" {
		if t.netdev != "" {
			t.offered = append(t.offered, MethodRelink)
			t.devDir = filepath.Join(sysRoot, "class", "net", t.netdev, "device")
		}
	} else {
		t.devDir = filepath.Join(sysRoot, "class", "infiniband", name, "device")
	}
	if t.devDir != "" {
		if h, err := deviceHandle(t.devDir); err == nil {
			ok, err := hasDevlink(h)
			if err != nil {
				return t, err
			}
			if ok {
				t.devlink = &h
				t.offered = append(t.offered, MethodDevlinkReload)
			}
		}
	}
	if t.fn != nil && t.fn.Driver != "" && (t.kind == "pci" || t.netdev != "") {
		if t.fn.Resettable {
			t.offered = append(t.offered, MethodPCIReset)
		}
		t.offered = append(t.offered, MethodUnbind)
	}
	if t.netdev != "" {
		t.offered = append(t.offered, MethodNetdevBounce)
	}
	return t, nil
}

// choose picks the method: the one asked for if the device offers it, or
// auto's first.
func (t target) choose(m Method) (Method, error) {
	if m == "" || m == MethodAuto {
		for _, m := range t.offered {
			if m != MethodNetdevBounce { // lighter: never chosen on its own
				return m, nil
			}
		}
		return "", fmt.Errorf("reset: %s (%s): no reset method applies to it", t.dev.Name, t.describe())
	}
	if !slices.Contains(t.offered, m) {
		return "", fmt.Errorf("reset: method %s: not offered by %s (%s; it offers %s)", m, t.dev.Name, t.describe(), methodList(t.offered))
	}
	return m, nil
}

func (t target) describe() string {
	var parts []string
	switch t.kind {
	case "rxe", "siw":
		parts = append(parts, "software "+t.kind)
	case "pci":
		parts = append(parts, "PCI device")
	default:
		parts = append(parts, "no PCI function and no software provider")
	}
	if t.netdev != "" {
		parts = append(parts, "on "+t.netdev)
	}
	if t.fn != nil {
		d := t.fn.Driver
		if d == "" {
			d = "no driver"
		}
		parts = append(parts, fmt.Sprintf("PCI %s, %s", t.fn.Addr, d))
	}
	if t.devlink != nil {
		parts = append(parts, "devlink "+t.devlink.String())
	} else {
		parts = append(parts, "no devlink instance")
	}
	return strings.Join(parts, ", ")
}

func methodList(ms []Method) string {
	if len(ms) == 0 {
		return "none"
	}
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// disassociates are the PCI drivers whose RDMA providers implement
// disassociate_ucontext (mlx4_ib, mlx5_ib, hns_roce), so that ib_uverbs cuts
// their users off at removal. Every other provider, rxe and siw among them,
// is taken as unable: its removal waits until every user has closed the
// device.
var disassociates = []string{"mlx4_core", "mlx5_core", "hns3"}

// privileged says whether the caller may reset: CAP_NET_ADMIN for RDMA and
// route netlink, CAP_SYS_ADMIN for writing sysfs PCI attributes.
func privileged(m Method) error {
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reset: read capabilities: %w", err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	need := []struct {
		c    uint
		name string
	}{{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}}
	if m == MethodUnbind || m == MethodPCIReset {
		need = append(need, struct {
			c    uint
			name string
		}{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"})
	}
	for _, n := range need {
		if !has(n.c) {
			return fmt.Errorf("reset: method %s needs %s: %w", m, n.name, os.ErrPermission)
		}
	}
	return nil
}
