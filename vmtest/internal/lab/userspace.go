package lab

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// userPackages is the guest's userspace, all from the host's Debian release.
// Libraries they need that are not listed come from the host through their
// ELF NEEDED entries.
var userPackages = []string{
	"busybox-static", "iproute2", "kmod",
	"rdma-core", "ibverbs-utils", "ibverbs-providers", "libibverbs1",
	"librdmacm1", "rdmacm-utils", "perftest",
	"libnl-3-200", "libnl-route-3-200", "libibumad3", "libpci3", "libkmod2",
	"libgcc-s1", // rping's pthread_cancel dlopens libgcc_s.so.1
	"udev",      // systemd-udevd and udevadm, for the rename lab tests' udev rule
}

// skipPrefixes are unpacked paths the guest never needs.
var skipPrefixes = []string{
	"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
	"usr/share/lintian", "usr/share/bash-completion", "usr/share/zsh",
	"etc/init.d", "lib/systemd", "usr/lib/systemd", "etc/systemd",
	"usr/lib/udev/hwdb.d", "lib/udev/hwdb.d", // 11 MB of hardware names
}

// hostLibDirs are searched for libraries the packages do not bring.
var hostLibDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"}

// userspace returns the guest userspace tree, building it once per cache.
func (b *Builder) userspace(ctx context.Context) (string, error) {
	dir := filepath.Join(b.Cache, "userspace")
	tree := filepath.Join(dir, "tree")
	stamp := filepath.Join(dir, "ready")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == userspaceRecipe() && !b.Refresh {
		return tree, nil
	}
	b.Log.Info("building userspace", "packages", len(userPackages))
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	debs, err := hostApt().download(ctx, filepath.Join(dir, "debs"), userPackages...)
	if err != nil {
		return "", err
	}
	root := filepath.Join(dir, "root")
	for _, d := range debs {
		if err := extractDeb(ctx, d, root); err != nil {
			return "", err
		}
	}
	if err := copyMergedUsr(root, tree); err != nil {
		return "", err
	}
	if err := resolveLibraries(tree, hostLibDirs); err != nil {
		return "", err
	}
	return tree, os.WriteFile(stamp, []byte(userspaceRecipe()), 0o644)
}

// usrPath maps a package path onto the merged-/usr layout of the guest.
func usrPath(rel string) string {
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		if rel == top || strings.HasPrefix(rel, top+"/") {
			return "usr/" + rel
		}
	}
	return rel
}

// copyMergedUsr copies an unpacked package tree into tree with /bin, /sbin,
// /lib and /lib64 folded into /usr, keeping symlinks as symlinks.
func copyMergedUsr(root, tree string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		for _, p := range skipPrefixes {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		dst := filepath.Join(tree, usrPath(rel))
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			os.Remove(dst)
			return os.Symlink(target, dst)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return copyFile(path, dst, fi.Mode().Perm())
		}
		return nil
	})
}

func isELFExecutable(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o111 == 0 {
		return false
	}
	return isELF(path)
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close() //nolint:errcheck // read only
	magic := make([]byte, 4)
	_, err = f.Read(magic)
	return err == nil && string(magic) == elf.ELFMAG
}

// resolveLibraries walks every ELF file in tree and copies the shared
// libraries and the program interpreter they need from hostDirs into
// tree/usr/lib/x86_64-linux-gnu, until nothing is missing.
func resolveLibraries(tree string, hostDirs []string) error {
	guestDirs := []string{"usr/lib/x86_64-linux-gnu", "usr/lib", "usr/lib64"}
	have := func(soname string) bool {
		for _, d := range guestDirs {
			if _, err := os.Stat(filepath.Join(tree, d, soname)); err == nil {
				return true
			}
		}
		return false
	}
	var queue []string
	err := filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && isELF(path) {
			queue = append(queue, path)
		}
		return err
	})
	if err != nil {
		return err
	}
	var missing []string
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		f, err := elf.Open(path)
		if err != nil {
			continue // not a loadable object (a .o, a firmware blob)
		}
		libs, _ := f.ImportedLibraries()
		interp := ""
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err == nil {
					interp = strings.TrimRight(string(b), "\x00")
				}
			}
		}
		_ = f.Close() // read only
		if interp != "" {
			dst := filepath.Join(tree, usrPath(strings.TrimPrefix(interp, "/")))
			if _, err := os.Stat(dst); err != nil {
				if err := copyFile(interp, dst, 0o755); err != nil {
					return fmt.Errorf("copy interpreter %s: %w", interp, err)
				}
			}
		}
		for _, soname := range libs {
			if have(soname) {
				continue
			}
			idx := slices.IndexFunc(hostDirs, func(d string) bool {
				_, err := os.Stat(filepath.Join(d, soname))
				return err == nil
			})
			if idx < 0 {
				missing = append(missing, fmt.Sprintf("%s (needed by %s)", soname, strings.TrimPrefix(path, tree)))
				continue
			}
			dst := filepath.Join(tree, "usr/lib/x86_64-linux-gnu", soname)
			if err := copyFile(filepath.Join(hostDirs[idx], soname), dst, 0o755); err != nil {
				return err
			}
			queue = append(queue, dst)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return errors.New("libraries not found in the packages or on the host: " + strings.Join(slices.Compact(missing), ", "))
	}
	return nil
}

// userspaceRecipe fingerprints what goes into the userspace tree, so a
// change to the package list rebuilds a cached tree.
func userspaceRecipe() string {
	return fingerprint(strings.Join(userPackages, " "), strings.Join(skipPrefixes, " "), strings.Join(hostLibDirs, " "))
}

// imageRecipe fingerprints what goes into a kernel's image besides the
// kernel packages: the userspace, the modules /init loads, and /init.
func imageRecipe() string {
	var mods []string
	for _, m := range guestModules {
		mods = append(mods, m.name)
	}
	mods = append(mods, onDemandModules...)
	return fingerprint(userspaceRecipe(), strings.Join(mods, " "), initScript)
}

func fingerprint(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
