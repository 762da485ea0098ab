package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// siwBuild is the outcome of building siw.ko (and netdevsim.ko) out of
// tree.
type siwBuild struct {
	ko      string // path of the module
	cc      string // compiler used
	foreign bool   // kbuild tools ran on the suite's own libc
	// nsim is the path of netdevsim.ko, "" when it did not build: Debian
	// builds no netdevsim either; the reset tests use its devlink reload.
	nsim string
}

// buildSIW compiles drivers/infiniband/sw/siw from Debian's linux-source
// against the unpacked linux-headers. Debian builds no siw.ko.
func (b *Builder) buildSIW(ctx context.Context, a *apt, dir, root, release, series, srcDeb string) (siwBuild, error) {
	src := filepath.Join(dir, "siw-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return siwBuild{}, err
	}
	top := "linux-source-" + series
	// Unpacking only one directory still reads the whole xz stream (~20 s).
	const extract = `dpkg-deb --fsys-tarfile "$1" | tar -xO "./usr/src/$2.tar.xz" | tar -xJ -C "$3" "$2/drivers/infiniband/sw/siw" "$2/drivers/net/netdevsim"`
	if err := runIn(ctx, "", nil, "sh", "-c", extract, "sh", srcDeb, top, src); err != nil {
		return siwBuild{}, err
	}
	siwDir := filepath.Join(src, top, "drivers", "infiniband", "sw", "siw")
	hdr := filepath.Join(root, "usr", "src", "linux-headers-"+release)

	// The headers' Makefile includes its common part by absolute path.
	mk := filepath.Join(hdr, "Makefile")
	text, err := os.ReadFile(mk)
	if err != nil {
		return siwBuild{}, err
	}
	text = bytes.ReplaceAll(text, []byte(" /usr/src/"), []byte(" "+root+"/usr/src/"))
	text = bytes.ReplaceAll(text, []byte("=/usr/src/"), []byte("="+root+"/usr/src/"))
	if err := os.WriteFile(mk, text, 0o644); err != nil {
		return siwBuild{}, err
	}

	cc, err := kernelCC(filepath.Join(hdr, ".kernelvariables"))
	if err != nil {
		return siwBuild{}, err
	}
	if _, err := exec.LookPath(cc); err != nil {
		// A kernel from a newer suite is built with a newer gcc than the
		// host has. Module code is plain C; the host's gcc compiles it, as
		// long as flags chosen for the newer compiler are taken back.
		b.Log.Warn("kernel compiler missing on the host, using gcc", "want", cc)
		cc = "gcc"
		if !ccAccepts(ctx, cc, "-fmin-function-alignment=16") {
			if err := dropConfig(filepath.Join(hdr, "include", "config", "auto.conf"), "CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT"); err != nil {
				return siwBuild{}, err
			}
		}
	}
	foreign, err := b.wrapForeignTools(ctx, a, dir, hdr)
	if err != nil {
		return siwBuild{}, err
	}
	// No pahole on the host: skip BTF for the module (the probes attach to
	// ib_core, not siw).
	if err := runIn(ctx, "", nil, "make", "-C", hdr, "M="+siwDir, "CONFIG_RDMA_SIW=m",
		"CONFIG_DEBUG_INFO_BTF_MODULES=", "CC="+cc, "modules"); err != nil {
		return siwBuild{}, err
	}
	ko := filepath.Join(siwDir, "siw.ko")
	if _, err := os.Stat(ko); err != nil {
		return siwBuild{}, err
	}
	out := siwBuild{ko: ko, cc: cc, foreign: foreign}
	nsimDir := filepath.Join(src, top, "drivers", "net", "netdevsim")
	err = runIn(ctx, "", nil, "make", "-C", hdr, "M="+nsimDir, "CONFIG_NETDEVSIM=m",
		"CONFIG_DEBUG_INFO_BTF_MODULES=", "CC="+cc, "modules")
	if err == nil {
		out.nsim = filepath.Join(nsimDir, "netdevsim.ko")
	} else {
		b.Log.Warn("netdevsim did not build: the image has no devlink reload to test", "err", err)
	}
	return out, nil
}

var kernelCCRE = regexp.MustCompile(`(?m)^CC\s*=.*?(gcc-\d+)\s*$`)

// kernelCC reads the compiler Debian built the kernel with from the headers'
// .kernelvariables ("CC = ... $(CROSS_COMPILE)gcc-12").
func kernelCC(path string) (string, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	m := kernelCCRE.FindSubmatch(text)
	if m == nil {
		return "gcc", nil
	}
	return string(m[1]), nil
}

func ccAccepts(ctx context.Context, cc, flag string) bool {
	return exec.CommandContext(ctx, cc, flag, "-x", "c", "-c", "-o", "/dev/null", "/dev/null").Run() == nil
}

// dropConfig removes a CONFIG_ line from an auto.conf.
func dropConfig(path, name string) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var out []string
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, name+"=") {
			out = append(out, line)
		}
	}
	return os.WriteFile(path, []byte(strings.Join(out, "")), 0o644)
}

// foreignLibs are the libraries kbuild's host tools (fixdep, modpost,
// objtool, genksyms, resolve_btfids) link against.
var foreignLibs = []string{"libc6", "libelf1t64", "zlib1g", "libzstd1"}

// wrapForeignTools makes kbuild's host programs run when they were linked
// against a newer glibc than the host's (a sid kernel on a bookworm host): it
// fetches that suite's libc and runs each program through its own ld.so.
func (b *Builder) wrapForeignTools(ctx context.Context, a *apt, dir, hdr string) (bool, error) {
	scripts, err := filepath.EvalSymlinks(filepath.Join(hdr, "scripts"))
	if err != nil {
		return false, err
	}
	kbuild := filepath.Dir(scripts)
	var tools []string
	err = filepath.WalkDir(kbuild, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && isELFExecutable(path) {
			tools = append(tools, path)
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if !slices.ContainsFunc(tools, func(p string) bool { return !hostCanRun(ctx, p) }) {
		return false, nil
	}
	b.Log.Warn("kbuild tools need a newer libc than the host's: running them on the suite's own")
	debs, err := a.download(ctx, filepath.Join(dir, "hostlib-debs"), foreignLibs...)
	if err != nil {
		return false, err
	}
	libRoot := filepath.Join(dir, "hostlib")
	for _, d := range debs {
		if err := extractDeb(ctx, d, libRoot); err != nil {
			return false, err
		}
	}
	libDir := filepath.Join(libRoot, "usr", "lib", "x86_64-linux-gnu")
	ldso := filepath.Join(libDir, "ld-linux-x86-64.so.2")
	if _, err := os.Stat(ldso); err != nil {
		return false, fmt.Errorf("suite libc has no %s", ldso)
	}
	err = filepath.WalkDir(kbuild, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.Contains(d.Name(), ".real-") || strings.HasSuffix(path, ".bin") {
			return err
		}
		if !isELFExecutable(path) {
			return nil
		}
		// Debian ships modpost and objtool as dispatchers that exec a
		// per-target binary found through /proc/self/exe, which is ld.so
		// once wrapped: put the x86-64 target in their place.
		for _, real := range []string{path + ".real-lsb-64", path + ".real-x86"} {
			if _, err := os.Stat(real); err == nil {
				if err := copyFile(real, path, 0o755); err != nil {
					return err
				}
				break
			}
		}
		if err := os.Rename(path, path+".bin"); err != nil {
			return err
		}
		wrapper := fmt.Sprintf("#!/bin/sh\nexec %s --library-path %s \"$0.bin\" \"$@\"\n", ldso, libDir)
		return os.WriteFile(path, []byte(wrapper), 0o755)
	})
	if err != nil {
		return false, err
	}
	out, _ := exec.CommandContext(ctx, filepath.Join(kbuild, "scripts", "basic", "fixdep")).CombinedOutput()
	if bytes.Contains(out, []byte("GLIBC_")) {
		return false, errors.New("kbuild tools still fail on the suite's libc: " + lastLines(string(out), 2))
	}
	return true, nil
}

// hostCanRun asks the host's dynamic loader whether every library and symbol
// version path needs is there.
func hostCanRun(ctx context.Context, path string) bool {
	out, err := exec.CommandContext(ctx, "/lib64/ld-linux-x86-64.so.2", "--list", path).CombinedOutput()
	return err == nil && !bytes.Contains(out, []byte("not found"))
}
