// Package udevrename is what a udev event's rename runs, for both commands
// that run it: `rdmatool rename udev` and rdmatool-udev-rename, the small
// program the packaged udev rule runs (it links only netlink, sysfs and
// rename, so udev's rename starts as fast as rdma-core's rdma_rename).
// It checks the options and the event's device before the kernel is asked
// anything, renames the device with package rename, and says so when the
// device was gone before its rename.
package udevrename

import (
	"context"
	"errors"
	"fmt"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/opfile"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
)

// Flags are the options both commands take, as given.
type Flags struct {
	Policies string // "map,guid"
	MapFile  string
	// MapNamed says the map file was named on the command line: it must
	// exist then, while the default may be missing.
	MapNamed bool
	Force    bool
}

// Options checks f and turns it into rename's options.
func (f Flags) Options() (rename.Options, error) {
	if err := opfile.CheckPath(f.MapFile); err != nil {
		return rename.Options{}, fmt.Errorf("--map %s: %w", quote.String(f.MapFile), err)
	}
	policies, err := rename.ParsePolicies(f.Policies)
	if err != nil {
		return rename.Options{}, err
	}
	return rename.Options{Policies: policies, Force: f.Force, MapFile: f.MapFile, MapMustExist: f.MapNamed}, nil
}

// Conn is the kernel connection a rename uses: *rdmanl.Client, or a fake
// in tests.
type Conn interface {
	rename.Renamer
	Close() error
}

// Run renames the device kernelName of the udev event whose DEVPATH is
// devpath ("" outside udev) with o, on the connection dial opens once
// everything else was checked. A device gone before its rename is an
// error that says udev's earlier rule may have renamed it.
func Run(ctx context.Context, o rename.Options, kernelName, devpath string, dial func() (Conn, error)) error {
	if err := rename.CheckUdevDevice(kernelName, devpath); err != nil {
		return err
	}
	o.Devices, o.All = []string{kernelName}, false
	job, err := rename.Prepare(ctx, o)
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck // the rename is done or failed before it closes
	_, err = job.Run(ctx, c)
	var step *rename.StepError
	if errors.Is(err, rdmanl.ErrNoDevice) && !errors.As(err, &step) {
		// Another rule may have renamed it first: rdma-core's
		// 60-rdma-persistent-naming.rules runs rdma_rename as a PROGRAM,
		// before any RUN. (A rename is by index: a device gone at its
		// rename was deleted, and the error says no more than that.)
		return fmt.Errorf("%w (renamed by an earlier udev rule? see rdmatool's udev README)", err)
	}
	return err
}
