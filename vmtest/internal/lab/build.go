package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Builder fetches and builds lab images into a cache directory.
type Builder struct {
	Cache   string // root of the cache, e.g. <repo>/.lab
	Refresh bool   // resolve and fetch again even when a build is cached
	Log     *slog.Logger
}

// Image is a built kernel: what Run boots.
type Image struct {
	Kernel    string    `json:"kernel"`     // matrix name
	Release   string    `json:"release"`    // uname -r
	Version   string    `json:"version"`    // Debian package version
	Packages  []string  `json:"packages"`   // .deb files it was built from
	Modules   []string  `json:"modules"`    // modules /init loads, in order
	Vmlinuz   string    `json:"vmlinuz"`    // path to the kernel image
	Initramfs string    `json:"initramfs"`  // path to the cpio archive
	BuiltAt   time.Time `json:"built_at"`   // when this image was built
	SIWCC     string    `json:"siw_cc"`     // compiler siw.ko was built with
	ForeignTC bool      `json:"foreign_tc"` // kbuild tools run on the suite's own libc
	Recipe    string    `json:"recipe"`     // imageRecipe() when built; a change rebuilds
}

// kernelDir is where k's image for this recipe lives: checkouts whose lab
// images differ (a branch that adds a module) each keep their own image
// instead of rebuilding over each other's.
func (b *Builder) kernelDir(k Kernel) string {
	return filepath.Join(b.Cache, "kernels", k.Name+"-"+imageRecipe())
}

// Cached returns the image built earlier for k, if any.
func (b *Builder) Cached(k Kernel) (Image, bool) {
	var img Image
	raw, err := os.ReadFile(filepath.Join(b.kernelDir(k), "image.json"))
	if err != nil || json.Unmarshal(raw, &img) != nil {
		return Image{}, false
	}
	// Paths are stored relative to the kernel's directory so a cache can move.
	img.Vmlinuz = filepath.Join(b.kernelDir(k), img.Vmlinuz)
	img.Initramfs = filepath.Join(b.kernelDir(k), img.Initramfs)
	if _, err := os.Stat(img.Initramfs); err != nil || img.Recipe != imageRecipe() {
		return Image{}, false
	}
	return img, true
}

// Build returns the image for k, building it unless a cached one exists.
func (b *Builder) Build(ctx context.Context, k Kernel) (Image, error) {
	if img, ok := b.Cached(k); ok && !b.Refresh {
		return img, nil
	}
	img, err := b.build(ctx, k)
	if err != nil {
		return Image{}, fmt.Errorf("lab: build kernel %s: %w", k.Name, err)
	}
	return img, nil
}

func (b *Builder) build(ctx context.Context, k Kernel) (Image, error) {
	log := b.Log.With("kernel", k.Name)
	start := time.Now()
	// Build beside the cached image and swap at the end, so guests started
	// meanwhile keep booting the old one.
	final := b.kernelDir(k)
	dir := final + ".new"
	if err := os.RemoveAll(dir); err != nil {
		return Image{}, err
	}
	a := hostApt()
	if k.Suite != "" {
		var err error
		if a, err = suiteApt(ctx, filepath.Join(b.Cache, "apt", k.Suite), k.Suite); err != nil {
			return Image{}, err
		}
	}
	image, err := firstDep(ctx, a, k.ImageMeta, "linux-image-")
	if err != nil {
		return Image{}, err
	}
	headers, err := firstDep(ctx, a, k.HeadersMeta, "linux-headers-")
	if err != nil {
		return Image{}, err
	}
	version, err := a.candidate(ctx, image)
	if err != nil {
		return Image{}, err
	}
	pkgs := []string{image, headers}
	// Newer Debian kernels split the image package into binary and modules
	// packages; the headers need their common part and kbuild.
	for _, p := range []struct{ pkg, prefix string }{
		{image, "linux-binary-"}, {image, "linux-modules-"}, {image, "linux-base-"},
		{headers, "linux-headers-"}, {headers, "linux-kbuild-"},
	} {
		deps, err := a.depends(ctx, p.pkg)
		if err != nil {
			return Image{}, err
		}
		for _, d := range deps {
			if strings.HasPrefix(d, p.prefix) {
				pkgs = append(pkgs, d)
			}
		}
	}
	series, err := kernelSeries(version)
	if err != nil {
		return Image{}, err
	}
	log.Info("fetching kernel", "image", image, "version", version)
	debDir := filepath.Join(dir, "debs")
	debs, err := a.download(ctx, debDir, pkgs...)
	if err != nil {
		return Image{}, err
	}
	srcDebs, err := a.download(ctx, debDir, "linux-source-"+series+"="+version)
	if err != nil {
		log.Warn("exact linux-source version missing, using the candidate", "err", err)
		if srcDebs, err = a.download(ctx, debDir, "linux-source-"+series); err != nil {
			return Image{}, err
		}
	}
	root := filepath.Join(dir, "root")
	for _, d := range debs {
		if err := extractDeb(ctx, d, root); err != nil {
			return Image{}, err
		}
	}
	release, modRoot, err := kernelRelease(root)
	if err != nil {
		return Image{}, err
	}
	vmlinuz := filepath.Join(root, "boot", "vmlinuz-"+release)
	if _, err := os.Stat(vmlinuz); err != nil {
		vmlinuz = filepath.Join(modRoot, release, "vmlinuz")
	}
	if _, err := os.Stat(vmlinuz); err != nil {
		return Image{}, fmt.Errorf("no vmlinuz for %s in the image packages", release)
	}
	log.Info("building siw", "release", release)
	siw, err := b.buildSIW(ctx, a, dir, root, release, series, srcDebs[0])
	if err != nil {
		return Image{}, fmt.Errorf("build siw: %w", err)
	}
	log.Info("collecting modules")
	tree := filepath.Join(dir, "tree")
	extra := []string{siw.ko}
	if siw.nsim != "" {
		extra = append(extra, siw.nsim)
	}
	mods, err := collectModules(ctx, root, modRoot, release, extra, tree)
	if err != nil {
		return Image{}, err
	}
	user, err := b.userspace(ctx)
	if err != nil {
		return Image{}, err
	}
	initramfs := filepath.Join(dir, "initramfs.cpio")
	if err := writeInitramfs(initramfs, k.Name, release, mods, user, tree); err != nil {
		return Image{}, fmt.Errorf("write initramfs: %w", err)
	}
	var names []string
	for _, d := range append(debs, srcDebs...) {
		names = append(names, filepath.Base(d))
	}
	img := Image{
		Kernel: k.Name, Release: release, Version: version, Packages: names, Modules: mods,
		Vmlinuz: vmlinuz, Initramfs: initramfs, BuiltAt: time.Now().UTC(),
		SIWCC: siw.cc, ForeignTC: siw.foreign, Recipe: imageRecipe(),
	}
	stored := img
	stored.Vmlinuz, _ = filepath.Rel(dir, vmlinuz)
	stored.Initramfs, _ = filepath.Rel(dir, initramfs)
	raw, _ := json.MarshalIndent(stored, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "image.json"), raw, 0o644); err != nil {
		return Image{}, err
	}
	old := final + ".old"
	os.RemoveAll(old)
	if err := os.Rename(final, old); err != nil && !os.IsNotExist(err) {
		return Image{}, err
	}
	if err := os.Rename(dir, final); err != nil {
		return Image{}, err
	}
	os.RemoveAll(old)
	img.Vmlinuz = filepath.Join(final, stored.Vmlinuz)
	img.Initramfs = filepath.Join(final, stored.Initramfs)
	log.Info("kernel ready", "release", release, "duration_seconds", time.Since(start).Seconds())
	return img, nil
}

// firstDep resolves a meta package to the versioned package it depends on.
func firstDep(ctx context.Context, a *apt, meta, prefix string) (string, error) {
	deps, err := a.depends(ctx, meta)
	if err != nil {
		return "", err
	}
	for _, d := range deps {
		if strings.HasPrefix(d, prefix) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%s depends on no %s* package (%v)", meta, prefix, deps)
}

var seriesRE = regexp.MustCompile(`^(\d+\.\d+)[.~+-]`)

// kernelSeries maps a Debian kernel version such as "6.12.117-1~deb12u1" to
// its source package series, "6.12".
func kernelSeries(version string) (string, error) {
	m := seriesRE.FindStringSubmatch(version)
	if m == nil {
		return "", fmt.Errorf("cannot read a kernel series from version %q", version)
	}
	return m[1], nil
}

// kernelRelease finds the single module directory the image packages
// brought: /lib/modules/<release> or, on merged-/usr packages, /usr/lib/....
func kernelRelease(root string) (release, modRoot string, err error) {
	for _, d := range []string{"lib/modules", "usr/lib/modules"} {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(root, d, e.Name(), "modules.order")); err == nil {
				return e.Name(), filepath.Join(root, d), nil
			}
		}
	}
	return "", "", errors.New("no kernel modules directory in the image packages")
}

func runIn(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLines(string(out), 8))
	}
	return nil
}

// ModuleRoot finds the directory holding go.mod at or above dir.
func ModuleRoot(dir string) (string, error) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
