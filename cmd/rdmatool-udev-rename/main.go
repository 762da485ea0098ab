// Command rdmatool-udev-rename gives a new RDMA device its persistent name
// when udev adds it: what `rdmatool rename udev` does, in a program that
// links only what the rename needs (netlink, sysfs and package rename, no
// cobra, Prometheus, eBPF or YAML), so that it starts about as fast as
// rdma-core's rdma_rename, which udev runs on the same events. The
// packaged rule (packaging/udev/70-rdmatool-naming.rules) runs it:
//
//	rdmatool-udev-rename [--policy P] [--map FILE] [--force] -- KERNEL_NAME
//
// It takes the flags of `rdmatool rename udev` and behaves as it does: it
// prints nothing and exits 0 when it renamed the device or had nothing to
// do, and on failure prints one line and exits 2 (docs/naming.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rdmatool/rdmatool/cmd/internal/udevrename"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv("DEVPATH"), os.Stderr, dial))
}

// dial opens the RDMA netlink client.
func dial() (udevrename.Conn, error) {
	c, err := rdmanl.Dial()
	if err != nil {
		return nil, err // not a nil *rdmanl.Client in an interface
	}
	return c, nil
}

// run renames the device args name and returns the exit status, writing
// one line to stderr on failure.
func run(args []string, devpath string, stderr io.Writer, dial func() (udevrename.Conn, error)) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rename1(ctx, args, devpath, dial); err != nil {
		fmt.Fprintln(stderr, "rdmatool-udev-rename:", quote.Text(err.Error()))
		return 2
	}
	return 0
}

func rename1(ctx context.Context, args []string, devpath string, dial func() (udevrename.Conn, error)) error {
	var f udevrename.Flags
	fs := flag.NewFlagSet("rdmatool-udev-rename", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the one line is the error's
	fs.StringVar(&f.Policies, "policy", rename.DefaultPolicies, "policies to try, in order: map, guid, pci, keep")
	fs.StringVar(&f.MapFile, "map", rename.DefaultMapFile, "map file of \"GUID NAME\" lines (the default may be missing)")
	fs.BoolVar(&f.Force, "force", false, "also rename devices whose name user space assigned")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errors.New("usage: rdmatool-udev-rename [--policy P] [--map FILE] [--force] -- KERNEL_NAME (rdmatool rename udev --help)")
		}
		return err
	}
	fs.Visit(func(fl *flag.Flag) { f.MapNamed = f.MapNamed || fl.Name == "map" })
	if fs.NArg() != 1 {
		return fmt.Errorf("want one device name after the flags, got %d arguments", fs.NArg())
	}
	o, err := f.Options()
	if err != nil {
		return err
	}
	return udevrename.Run(ctx, o, fs.Arg(0), devpath, dial)
}
