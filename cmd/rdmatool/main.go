// Command rdmatool finds leaked RDMA resources, renames devices by node GUID
// and resets devices safely. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// version is stamped by the linker (-X main.version=...); it is never written
// at run time.
var version = "dev"

// Exit statuses, as documented in rdmatool(1).
const (
	exitOK          = 0   // success; for checks: nothing found
	exitFindings    = 1   // a check reported findings
	exitError       = 2   // bad usage, permission, kernel or I/O failure, timeout
	exitInterrupted = 130 // SIGINT or SIGTERM
)

// errFindings is returned by check commands that printed findings.
var errFindings = errors.New("findings reported")

func main() {
	// RDMATOOL_CPUPROFILE=FILE writes a CPU profile, for benchmarks in the lab.
	if path := os.Getenv("RDMATOOL_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				code := run(os.Args[1:], os.Stdout, os.Stderr)
				pprof.StopCPUProfile()
				f.Close()
				os.Exit(code)
			}
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	return exitCode(ctx, err, stderr)
}

// exitCode prints err once and maps it to the exit status.
func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errFindings):
		return exitFindings
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "rdmatool: interrupted")
		return exitInterrupted
	}
	fmt.Fprintln(stderr, "rdmatool:", userMessage(err))
	return exitError
}

// userMessage adds a hint where the user can act on the cause.
func userMessage(err error) string {
	msg := err.Error()
	if errors.Is(err, os.ErrPermission) {
		msg += " (run as root or grant CAP_NET_ADMIN)"
	}
	return msg
}
