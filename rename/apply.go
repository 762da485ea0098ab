package rename

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// StepError is a rename the kernel refused. It matches what the kernel's
// error matches: os.ErrExist for a taken name, os.ErrPermission without
// CAP_NET_ADMIN, rdmanl.ErrNoDevice when the device is gone.
type StepError struct {
	From, To string
	Err      error // from Renamer.Rename
	// Rollback is set when undoing the group's earlier renames failed as
	// well; Stranded then lists the devices left under another name, as
	// "rdmatool-tmp3 (was rxe2)".
	Rollback error
	Stranded []string
	// Deleted lists the group's other devices that were gone when their
	// renames were to be undone (deleted meanwhile), by their old names:
	// nothing was left under a wrong name for them.
	Deleted []string
}

func (e *StepError) Error() string {
	return fmt.Sprintf("rename: %s to %s: %s", e.From, e.To, e.cause())
}

// cause says why the rename failed, and what undoing its group left.
func (e *StepError) cause() string {
	s := causeText(e.Err)
	if len(e.Deleted) > 0 {
		s += fmt.Sprintf("; %s deleted meanwhile", strings.Join(e.Deleted, ", "))
	}
	if e.Rollback != nil {
		s += fmt.Sprintf("; undoing the renames before it failed too (%s): %s left under the wrong name",
			causeText(e.Rollback), strings.Join(e.Stranded, ", "))
	}
	return s
}

// Unwrap returns the kernel's error.
func (e *StepError) Unwrap() error { return e.Err }

// AbandonedError is a rename given up (undone, or never made) because
// another rename of its group failed.
type AbandonedError struct {
	From, To string
	Cause    *StepError
}

func (e *AbandonedError) Error() string {
	return fmt.Sprintf("rename: %s to %s: given up because renaming %s to %s failed: %s", e.From, e.To, e.Cause.From, e.Cause.To, e.Cause.cause())
}

// Unwrap returns the failure that caused it.
func (e *AbandonedError) Unwrap() error { return e.Cause }

// causeText is err without rdmanl's "rdmanl: rename a to b:" wording, which
// a StepError already says.
func causeText(err error) string {
	var e *rdmanl.Error
	if errors.As(err, &e) {
		s := e.Err.Error()
		if e.Message != "" {
			s += " (kernel: " + e.Message + ")"
		}
		return s
	}
	return err.Error()
}

// applyGroup makes a group's renames in order. When one fails, the renames
// made before it are undone in reverse order, so no device keeps a
// temporary name; the undo runs even when ctx has ended. It returns nil or
// an error per device index of the group: a *StepError for the device whose
// rename failed, an *AbandonedError for the others.
func applyGroup(ctx context.Context, r Renamer, devs map[uint32]rdmanl.Device, g []Step) map[uint32]error {
	current := func(s Step, name string) rdmanl.Device {
		d := devs[s.Index]
		d.Name = name
		return d
	}
	// A device's old and new name: a device that steps aside to a
	// temporary name has two steps, the first from its old name and the
	// last to its new one.
	from, to := map[uint32]string{}, map[uint32]string{}
	for _, u := range g {
		if _, ok := from[u.Index]; !ok {
			from[u.Index] = u.From
		}
		to[u.Index] = u.To
	}
	for k, s := range g {
		err := r.Rename(ctx, current(s, s.From), s.To)
		if err == nil {
			continue
		}
		// Named as the user knows the device: a step from a temporary
		// name is the device's move from its old name.
		failure := &StepError{From: from[s.Index], To: s.To, Err: err}
		undo := context.WithoutCancel(ctx)
		for j := k - 1; j >= 0; j-- {
			u := g[j]
			err := r.Rename(undo, current(u, u.To), u.From)
			switch {
			case err == nil:
			case errors.Is(err, rdmanl.ErrNoDevice):
				// Deleted meanwhile (a racing DELLINK): nothing is
				// left under a wrong name.
				if u.Index != s.Index && !slices.Contains(failure.Deleted, from[u.Index]) {
					failure.Deleted = append(failure.Deleted, from[u.Index])
				}
			default:
				if failure.Rollback == nil {
					failure.Rollback = err
				}
				failure.Stranded = append(failure.Stranded, fmt.Sprintf("%s (was %s)", u.To, u.From))
			}
		}
		errs := map[uint32]error{}
		for i := range from {
			errs[i] = &AbandonedError{From: from[i], To: to[i], Cause: failure}
		}
		errs[s.Index] = failure
		return errs
	}
	return nil
}
