package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// modName normalises a module file or name: "crc32-pclmul.ko.xz" -> "crc32_pclmul".
func modName(s string) string {
	s = filepath.Base(s)
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "-", "_")
}

// modDep is one line of modules.dep.
type modDep struct {
	path string   // relative to /lib/modules/<release>
	deps []string // names
}

// parseModulesDep reads modules.dep ("kernel/a.ko: kernel/b.ko kernel/c.ko").
func parseModulesDep(r io.Reader) (map[string]modDep, error) {
	m := map[string]modDep{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		path, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var deps []string
		for d := range strings.FieldsSeq(rest) {
			deps = append(deps, modName(d))
		}
		m[modName(path)] = modDep{path: path, deps: deps}
	}
	return m, sc.Err()
}

// parseBuiltin reads modules.builtin (one "kernel/.../x.ko" a line).
func parseBuiltin(r io.Reader) (map[string]bool, error) {
	m := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			m[modName(line)] = true
		}
	}
	return m, sc.Err()
}

// moduleClosure returns the modules to ship for want, dependencies first, and
// the wanted modules that are loadable (present and not built in).
func moduleClosure(deps map[string]modDep, builtin map[string]bool, want []string, optional map[string]bool) (files []string, load []string, err error) {
	seen := map[string]bool{}
	var visit func(name string, stack []string) error
	visit = func(name string, stack []string) error {
		if seen[name] || builtin[name] {
			return nil
		}
		d, ok := deps[name]
		if !ok {
			return fmt.Errorf("module %s (needed by %v) is not in modules.dep", name, stack)
		}
		seen[name] = true
		for _, dep := range d.deps {
			if err := visit(dep, append(stack, name)); err != nil {
				return err
			}
		}
		files = append(files, d.path)
		return nil
	}
	for _, name := range want {
		_, present := deps[name]
		switch {
		case builtin[name]:
			continue
		case !present && optional[name]:
			continue
		}
		if err := visit(name, nil); err != nil {
			return nil, nil, err
		}
		load = append(load, name)
	}
	return files, load, nil
}

// collectModules places the out-of-tree modules (siw.ko, netdevsim.ko)
// beside the kernel's modules, runs depmod over the unpacked tree, and copies the closure of guestModules and
// onDemandModules, decompressed, into tree/usr/lib/modules/<release> with a fresh modules.dep. It returns the
// modules /init loads: guestModules'.
func collectModules(ctx context.Context, root, modRoot, release string, extra []string, tree string) ([]string, error) {
	kdir := filepath.Join(modRoot, release)
	for _, ko := range extra {
		if err := copyFile(ko, filepath.Join(kdir, "extra", filepath.Base(ko)), 0o644); err != nil {
			return nil, err
		}
	}
	if err := mergedUsr(root); err != nil {
		return nil, err
	}
	if err := runIn(ctx, "", nil, "depmod", "-b", root, release); err != nil {
		return nil, err
	}
	deps, builtin, err := readModuleTables(kdir)
	if err != nil {
		return nil, err
	}
	var want []string
	optional := map[string]bool{}
	for _, m := range guestModules {
		want = append(want, m.name)
		optional[m.name] = m.optional
	}
	files, load, err := moduleClosure(deps, builtin, want, optional)
	if err != nil {
		return nil, err
	}
	more, _, err := moduleClosure(deps, builtin, onDemandModules, nil)
	if err != nil {
		return nil, err
	}
	for _, f := range more {
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	out := filepath.Join(tree, "usr", "lib", "modules", release)
	for _, f := range files {
		if err := decompressModule(ctx, filepath.Join(kdir, f), filepath.Join(out, stripCompression(f))); err != nil {
			return nil, err
		}
	}
	for _, f := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
		if err := copyFile(filepath.Join(kdir, f), filepath.Join(out, f), 0o644); err != nil {
			return nil, err
		}
	}
	if err := mergedUsr(tree); err != nil {
		return nil, err
	}
	if err := runIn(ctx, "", nil, "depmod", "-b", tree, release); err != nil {
		return nil, err
	}
	return load, nil
}

// readModuleTables reads modules.dep and modules.builtin of the module
// directory kdir (/lib/modules/RELEASE).
func readModuleTables(kdir string) (map[string]modDep, map[string]bool, error) {
	depFile, err := os.Open(filepath.Join(kdir, "modules.dep"))
	if err != nil {
		return nil, nil, err
	}
	deps, err := parseModulesDep(depFile)
	_ = depFile.Close() // read only
	if err != nil {
		return nil, nil, err
	}
	bFile, err := os.Open(filepath.Join(kdir, "modules.builtin"))
	if err != nil {
		return nil, nil, err
	}
	builtin, err := parseBuiltin(bFile)
	_ = bFile.Close() // read only
	return deps, builtin, err
}

// mergedUsr makes root/lib point at usr/lib when only the latter exists, so
// depmod -b finds lib/modules in either layout.
func mergedUsr(root string) error {
	if _, err := os.Lstat(filepath.Join(root, "lib")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(root, "usr", "lib"), 0o755); err != nil {
		return err
	}
	return os.Symlink("usr/lib", filepath.Join(root, "lib"))
}

func stripCompression(path string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if s, ok := strings.CutSuffix(path, ext); ok {
			return s
		}
	}
	return path
}

func decompressModule(ctx context.Context, src, dst string) error {
	var tool string
	switch filepath.Ext(src) {
	case ".ko":
		return copyFile(src, dst, 0o644)
	case ".xz":
		tool = "xz"
	case ".zst":
		tool = "zstd"
	case ".gz":
		tool = "gzip"
	default:
		return fmt.Errorf("unknown module compression: %s", src)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, tool, "-dc", src)
	cmd.Stdout = out
	if err := cmd.Run(); err != nil {
		_ = out.Close() // the command failed: that error is returned
		return fmt.Errorf("%s -dc %s: %w", tool, src, err)
	}
	return out.Close()
}
