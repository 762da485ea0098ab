// Command vmlab builds the rdmatool lab images and runs commands and Go test
// binaries inside them.
//
//	vmlab build [-kernel NAME|all] [-system] [-refresh]
//	vmlab run   [-kernel NAME] [-system] [-timeout D] [-share DIR]... -- COMMAND [ARG...]
//	vmlab exec  [-kernel NAME] [-system] [-timeout D] TESTBINARY [ARG...]   (go test -exec)
//	vmlab info  [-kernel NAME]
//	vmlab kernels
//
// -system builds or boots the system guest: a Debian root disk with systemd
// (docs/lab.md) on the same kernels.
//
// Kernels, userspace and run directories are cached in $VMTEST_CACHE, else
// $XDG_CACHE_HOME/rdmatool-lab (~/.cache/rdmatool-lab), so fresh clones of the
// repository reuse them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmatool/rdmatool/vmtest/internal/lab"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmlab:", err)
		if code == 0 {
			code = 3
		}
	}
	os.Exit(code)
}

const usage = `usage:
  vmlab build   [-kernel NAME|all] [-system] [-refresh]
  vmlab run     [-kernel NAME] [-system] [-timeout D] [-share DIR]... -- COMMAND [ARG...]
  vmlab exec    [-kernel NAME] [-system] [-timeout D] TESTBINARY [ARG...]
  vmlab info    [-kernel NAME]
  vmlab kernels`

func run(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New(usage)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	root, err := moduleRoot()
	if err != nil {
		return 2, err
	}
	cache, err := cacheDir()
	if err != nil {
		return 2, err
	}
	b := &lab.Builder{Cache: cache, Log: log}

	fs := flag.NewFlagSet("vmlab "+args[0], flag.ContinueOnError)
	kernel := fs.String("kernel", envOr("VMTEST_KERNEL", "6.12"), "kernel of the matrix: 6.1, 6.12, 7.x (build: also all)")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit for the whole guest run")
	refresh := fs.Bool("refresh", false, "resolve and fetch again even if cached")
	memory := fs.String("memory", "2G", "guest memory")
	icount := fs.Int("icount", envInt("VMTEST_ICOUNT"), "run: count instructions for guest time (QEMU -icount shift=N, e.g. 2; benchmarks)")
	keep := fs.Bool("keep", false, "keep the run directory with console.log")
	system := fs.Bool("system", false, "the system guest (systemd on a Debian root disk) instead of the initramfs guest")
	var shares multiFlag
	fs.Var(&shares, "share", "host directory to mount at the same path in the guest (repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2, err
	}
	b.Refresh = *refresh

	switch args[0] {
	case "kernels":
		for _, k := range lab.Matrix {
			fmt.Println(k.Name)
		}
		return 0, nil
	case "build":
		kernels := lab.Matrix
		if *kernel != "all" {
			k, err := lab.LookupKernel(*kernel)
			if err != nil {
				return 2, err
			}
			kernels = []lab.Kernel{k}
		}
		for _, k := range kernels {
			img, err := b.Build(ctx, k)
			if err != nil {
				return 1, err
			}
			fmt.Printf("%s\t%s\t%s\n", k.Name, img.Release, img.Version)
			if *system {
				sys, err := b.System(ctx, img)
				if err != nil {
					return 1, err
				}
				fmt.Printf("%s\tsystem\t%s\n", k.Name, sys.Root)
			}
		}
		return 0, nil
	case "info":
		img, err := image(b, *kernel)
		if err != nil {
			return 1, err
		}
		out, _ := json.MarshalIndent(img, "", "  ")
		fmt.Println(string(out))
		return 0, nil
	case "run", "exec":
		img, err := image(b, *kernel)
		if err != nil {
			return 1, err
		}
		command := fs.Args()
		if len(command) == 0 {
			return 2, errors.New(usage)
		}
		cwd, err := os.Getwd()
		if err != nil {
			return 2, err
		}
		spec := lab.RunSpec{
			Image: img, Command: command, Dir: cwd, Stdout: os.Stdout,
			Shares: append([]string{root}, shares...), Timeout: *timeout,
			Memory: *memory, RunDir: filepath.Join(cache, "runs"), Keep: *keep, ICount: *icount,
			Env: passEnv(os.Environ()),
		}
		if *icount > 0 { // the guest's scripts say which clock they measured
			spec.Env = append(slices.DeleteFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, "VMTEST_ICOUNT=") }),
				"VMTEST_ICOUNT="+strconv.Itoa(*icount))
		}
		if *system {
			sys, err := b.System(ctx, img)
			if err != nil {
				return 1, err
			}
			spec.System = &sys
		}
		if args[0] == "exec" {
			bin, err := filepath.Abs(command[0])
			if err != nil {
				return 2, err
			}
			spec.Command[0] = bin
			spec.Shares = append(spec.Shares, filepath.Dir(bin))
		}
		status, err := lab.Run(ctx, spec)
		return status, err
	}
	return 2, fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func image(b *lab.Builder, name string) (lab.Image, error) {
	k, err := lab.LookupKernel(name)
	if err != nil {
		return lab.Image{}, err
	}
	img, ok := b.Cached(k)
	if !ok {
		return lab.Image{}, fmt.Errorf("kernel %s: %w", name, lab.ErrNotBuilt)
	}
	return img, nil
}

// passEnv keeps the variables a test binary reads: Go's own (GOCOVERDIR,
// GODEBUG, GOTRACEBACK), the lab's and rdmatool's.
func passEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "VMTEST_KERNEL" || k == "VMTEST_CACHE" {
			continue // the guest sets its own
		}
		for _, p := range []string{"GO", "VMTEST_", "RDMATOOL_"} {
			if strings.HasPrefix(k, p) && k != "GOROOT" && k != "GOPATH" {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return lab.ModuleRoot(dir)
}

func cacheDir() (string, error) {
	if c := os.Getenv("VMTEST_CACHE"); c != "" {
		return filepath.Abs(c)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "rdmatool-lab"), nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// envInt is the number in environment variable k, 0 when unset or not one.
func envInt(k string) int {
	n, _ := strconv.Atoi(os.Getenv(k))
	return n
}
