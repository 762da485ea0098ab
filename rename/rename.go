package rename

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

// Renamer lists and renames RDMA devices; *rdmanl.Client is one.
type Renamer interface {
	Devices(ctx context.Context) ([]rdmanl.Device, error)
	Rename(ctx context.Context, dev rdmanl.Device, name string) error
}

var _ Renamer = (*rdmanl.Client)(nil)

// Options say which devices to rename and how to choose their names.
type Options struct {
	// Devices names the devices to rename, by current name; All renames
	// every device instead.
	Devices []string
	All     bool
	// Policies are tried in order; empty means DefaultPolicies.
	Policies []Policy
	// MapFile is the map policy's file; empty means DefaultMapFile. When
	// it is missing the map policy names nothing, unless MapMustExist
	// (set it for a file the user named).
	MapFile      string
	MapMustExist bool
	// DryRun plans the renames without applying them.
	DryRun bool
	// Force renames devices whose name user space assigned (from 6.11 the
	// kernel reports NAME_ASSIGN_TYPE user for rxe and siw devices made by
	// "rdma link add NAME"); by default they keep it.
	Force bool
	// SysRoot is the sysfs root the pci policy reads; empty means /sys.
	SysRoot string
}

// Status is the outcome for one device.
type Status string

// Outcomes.
const (
	StatusRenamed   Status = "renamed"   // the kernel took the new name
	StatusPlanned   Status = "planned"   // a dry run would rename it
	StatusUnchanged Status = "unchanged" // it already has the chosen name
	StatusSkipped   Status = "skipped"   // no policy named it, or its name is user-assigned
	StatusFailed    Status = "failed"    // see Error; it kept its old name
)

// Result is the outcome for one device. JSON field names are API.
type Result struct {
	// Device is the device's name when rdmatool started, Index its kernel
	// index.
	Device   string      `json:"device"`
	Index    uint32      `json:"index"`
	NodeGUID rdmanl.GUID `json:"node_guid"`
	// From and To are the old and the chosen name; To equals From when no
	// policy named the device.
	From string `json:"from"`
	To   string `json:"to"`
	// Policy chose To; "" when every policy skipped the device.
	Policy Policy `json:"policy"`
	Status Status `json:"status"`
	// Applied is true when the kernel now calls the device To (and To
	// differs from From).
	Applied bool `json:"applied"`
	// Reason says why: the policy's source ("map /etc/rdmatool/names.conf:3",
	// "guid 0000:00ff:fe00:0a01", "pci 0000:3b:00.0", "keep"), or why the
	// device was skipped.
	Reason string `json:"reason"`
	// Error is why the rename failed; "" otherwise.
	Error string `json:"error"`
}

// Report is what Run did. JSON field names are API.
type Report struct {
	Renames []Result `json:"renames"`
	// Steps are the renames in the order they were (or, in a dry run,
	// would be) made, temporary names included.
	Steps    []Step   `json:"steps"`
	Policies []Policy `json:"policies"`
	MapFile  string   `json:"map_file"` // "" when the map policy is not used
	DryRun   bool     `json:"dry_run"`
}

// Job is a checked rename request, its map file read: what Prepare returns
// and Job.Run carries out.
type Job struct {
	o        Options
	policies []Policy
	mapFile  string // "" when the map policy is not used
	n        *namer
}

// Prepare checks o and reads the map file, without any kernel call, so
// that a caller can report bad input before it opens netlink. The map file
// is read once, here; Job.Run uses what was read. A read that hangs is
// given up when ctx ends.
func Prepare(ctx context.Context, o Options) (*Job, error) {
	j, err := prepare(ctx, o)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// prepare is Prepare, but also returns the job when o is bad, for its
// report.
func prepare(ctx context.Context, o Options) (*Job, error) {
	j := &Job{o: o, policies: o.Policies}
	if len(j.policies) == 0 {
		j.policies, _ = ParsePolicies(DefaultPolicies)
	}
	if !o.All && len(o.Devices) == 0 {
		return j, errors.New("rename: no device given")
	}
	if slices.Contains(o.Devices, "") {
		return j, errors.New("rename: empty device name")
	}
	for _, d := range o.Devices {
		if len(d) > maxNameLen {
			return j, fmt.Errorf("rename: device %s: no RDMA device has a name longer than %d bytes", quote.String(d), maxNameLen)
		}
	}
	j.n = &namer{policies: j.policies, pci: func(dev string) (sysfs.PCILocation, error) {
		root := o.SysRoot
		if root == "" {
			root = "/sys"
		}
		return sysfs.ReadPCILocation(root, dev)
	}}
	if slices.Contains(j.policies, PolicyMap) {
		j.mapFile = o.MapFile
		if j.mapFile == "" {
			j.mapFile = DefaultMapFile
		}
		m, err := loadMap(ctx, j.mapFile)
		switch {
		case err == nil:
			j.n.m = m
		case !o.MapMustExist && errors.Is(err, fs.ErrNotExist):
			j.n.mapNote = "no map file " + j.mapFile
		default:
			return j, err
		}
	}
	return j, nil
}

// Run is Prepare followed by Job.Run. When Prepare fails, the report has
// no devices.
func Run(ctx context.Context, r Renamer, o Options) (Report, error) {
	j, err := prepare(ctx, o)
	if err != nil {
		return j.report(), err
	}
	return j.Run(ctx, r)
}

// report is an empty report of the job.
func (j *Job) report() Report {
	return Report{Renames: []Result{}, Steps: []Step{}, Policies: j.policies, MapFile: j.mapFile, DryRun: j.o.DryRun}
}

// Run chooses names for the devices the job selects, plans the renames
// and, unless it is a dry run, applies them. The report covers every
// selected device, also when an error is returned: an error means at least
// one rename failed (the report says which) or nothing could be planned.
// No device is ever left under a temporary name: a failed step rolls back
// the renames its group made.
func (j *Job) Run(ctx context.Context, r Renamer) (Report, error) {
	o, n, rep := j.o, j.n, j.report()
	devs, err := r.Devices(ctx)
	if err != nil {
		return rep, err
	}
	targets, err := selectDevices(devs, o)
	if err != nil {
		return rep, err
	}

	// Choose names; want holds the renames to plan.
	want := map[uint32]string{}
	at := map[uint32]int{}  // result index by device index
	errs := map[int]error{} // failures by result index
	for _, d := range targets {
		c := n.choose(d)
		res := Result{Device: d.Name, Index: d.Index, NodeGUID: d.NodeGUID, From: d.Name, To: c.to, Policy: c.policy, Reason: c.reason}
		switch {
		case c.policy == "":
			res.Status = StatusSkipped
		case c.to == d.Name:
			res.Status = StatusUnchanged
		case d.HasNameAssign && d.NameAssignType == rdmanl.NameAssignUser && !o.Force:
			res.Status = StatusSkipped
			res.Reason += "; kept the name user space assigned (--force renames it)"
		default:
			if err := ValidateName(c.to); err != nil {
				errs[len(rep.Renames)] = fmt.Errorf("rename: %s to %s: %w", d.Name, c.to, err)
				break
			}
			want[d.Index] = c.to
		}
		at[d.Index] = len(rep.Renames)
		rep.Renames = append(rep.Renames, res)
	}

	p, failed := planRenames(devs, want)
	for i, err := range failed {
		errs[at[i]] = err
	}
	rep.Steps = p.steps()
	if o.DryRun {
		for i := range want {
			if failed[i] == nil {
				rep.Renames[at[i]].Status = StatusPlanned
			}
		}
		return rep, failures(&rep, errs)
	}

	byIndex := map[uint32]rdmanl.Device{}
	for _, d := range devs {
		byIndex[d.Index] = d
	}
	for _, g := range p.groups {
		groupErrs := applyGroup(ctx, r, byIndex, g)
		for _, s := range g {
			if err := groupErrs[s.Index]; err != nil {
				errs[at[s.Index]] = err
			} else if !s.Temporary {
				rep.Renames[at[s.Index]].Status, rep.Renames[at[s.Index]].Applied = StatusRenamed, true
			}
		}
	}
	return rep, failures(&rep, errs)
}

// selectDevices returns the devices o names, in the kernel's order.
func selectDevices(devs []rdmanl.Device, o Options) ([]rdmanl.Device, error) {
	if o.All {
		return devs, nil
	}
	var out []rdmanl.Device
	for _, name := range o.Devices {
		d, err := rdmanl.FindDevice(devs, name)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(out, func(o rdmanl.Device) bool { return o.Name == name }) {
			out = append(out, d)
		}
	}
	return out, nil
}

// FailureError is returned when renames failed; the report lists them all.
// It matches what each failure matches (os.ErrPermission, os.ErrExist, ...).
type FailureError struct {
	Errs []error // one per failed device, in report order
}

func (e *FailureError) Error() string {
	if n := len(e.Errs) - 1; n > 0 {
		return fmt.Sprintf("%v (and %d more failed renames)", e.Errs[0], n)
	}
	return e.Errs[0].Error()
}

// Unwrap returns every failure.
func (e *FailureError) Unwrap() []error { return e.Errs }

// failures sets the failed results and returns their errors as one.
func failures(rep *Report, errs map[int]error) error {
	if len(errs) == 0 {
		return nil
	}
	e := &FailureError{}
	for i := range rep.Renames {
		if err := errs[i]; err != nil {
			rep.Renames[i].Status, rep.Renames[i].Applied, rep.Renames[i].Error = StatusFailed, false, err.Error()
			e.Errs = append(e.Errs, err)
		}
	}
	return e
}
