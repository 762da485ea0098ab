package lab

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cpioEntry is one member of an archive as GNU cpio lists it.
type cpioEntry struct {
	Name   string
	Mode   string // as ls -l prints it: "drwxr-xr-x"
	Target string // symlinks only
}

func needCPIO(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("cpio is not installed")
	}
}

// listCPIO lists archive with `cpio -tvn`, which also checks its framing:
// cpio fails on a bad magic, size or padding.
func listCPIO(t *testing.T, archive string) []cpioEntry {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.CommandContext(t.Context(), "cpio", "-tvn", "--quiet")
	cmd.Stdin = f
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("cpio -tvn: %v: %s", err, stderr.String())
	}
	var entries []cpioEntry
	for line := range strings.Lines(string(out)) {
		// mode nlink uid gid size month day year name [-> target]
		fields := strings.Fields(line)
		if len(fields) < 9 {
			t.Fatalf("cpio -tvn: unexpected line %q", line)
		}
		if fields[2] != "0" || fields[3] != "0" {
			t.Errorf("%s is owned by %s:%s, want 0:0", fields[8], fields[2], fields[3])
		}
		e := cpioEntry{Name: fields[8], Mode: fields[0]}
		if len(fields) == 11 && fields[9] == "->" {
			e.Target = fields[10]
		}
		entries = append(entries, e)
	}
	return entries
}

// extractCPIO unpacks archive with `cpio -i` into a new directory.
func extractCPIO(t *testing.T, archive string) string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.CommandContext(t.Context(), "cpio", "-i", "-d", "--no-absolute-filenames", "--no-preserve-owner", "--quiet", "-D", dir)
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("cpio -i: %v: %s", err, out)
	}
	return dir
}

// makeTree creates files under root: a name ending in "/" is a directory,
// "-> target" a symlink, anything else a file's content. Modes are set
// exactly, whatever the umask.
func makeTree(t *testing.T, root string, entries []treeEntry) {
	t.Helper()
	for _, e := range entries {
		p := filepath.Join(root, e.name)
		mkdirs(t, root, filepath.Dir(filepath.Clean(e.name)))
		var err error
		switch {
		case strings.HasSuffix(e.name, "/"):
			mkdirs(t, root, filepath.Clean(e.name))
			err = os.Chmod(p, e.mode)
		case strings.HasPrefix(e.body, "-> "):
			err = os.Symlink(strings.TrimPrefix(e.body, "-> "), p)
		default:
			if err = os.WriteFile(p, []byte(e.body), e.mode); err == nil {
				err = os.Chmod(p, e.mode)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// mkdirs creates root/rel and its missing parents with mode 0755.
func mkdirs(t *testing.T, root, rel string) {
	t.Helper()
	if rel == "." {
		return
	}
	mkdirs(t, root, filepath.Dir(rel))
	p := filepath.Join(root, rel)
	switch err := os.Mkdir(p, 0o755); {
	case err == nil:
		if err := os.Chmod(p, 0o755); err != nil { // whatever the umask
			t.Fatal(err)
		}
	case !errors.Is(err, fs.ErrExist):
		t.Fatal(err)
	}
}

type treeEntry struct {
	name string
	mode os.FileMode
	body string
}

func TestCPIOWriterTree(t *testing.T) {
	t.Parallel()
	needCPIO(t)
	root := t.TempDir()
	makeTree(t, root, []treeEntry{
		{name: "etc/", mode: 0o755},
		{name: "etc/modprobe.d/rdma.conf", mode: 0o644, body: "options rdma_rxe\n"},
		{name: "root/", mode: 0o700},
		{name: "usr/bin/busybox", mode: 0o755, body: "\x7fELF busybox"},
		{name: "usr/bin/ip", body: "-> ../sbin/ip"},
		{name: "usr/lib/x86_64-linux-gnu/libibverbs.so.1", body: "-> libibverbs.so.1.14.44.0"},
		{name: "usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0", mode: 0o644, body: strings.Repeat("verbs", 1000) + "x"},
		{name: "usr/sbin/ip", mode: 0o750, body: "ip"},
		{name: "var/empty", mode: 0o600, body: ""},
	})
	archive := filepath.Join(t.TempDir(), "tree.cpio")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	c := newCPIOWriter(f)
	if err := c.tree(root); err != nil {
		t.Fatal(err)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	want := []cpioEntry{
		{Name: "etc", Mode: "drwxr-xr-x"},
		{Name: "etc/modprobe.d", Mode: "drwxr-xr-x"},
		{Name: "etc/modprobe.d/rdma.conf", Mode: "-rw-r--r--"},
		{Name: "root", Mode: "drwx------"},
		{Name: "usr", Mode: "drwxr-xr-x"},
		{Name: "usr/bin", Mode: "drwxr-xr-x"},
		{Name: "usr/bin/busybox", Mode: "-rwxr-xr-x"},
		{Name: "usr/bin/ip", Mode: "lrwxrwxrwx", Target: "../sbin/ip"},
		{Name: "usr/lib", Mode: "drwxr-xr-x"},
		{Name: "usr/lib/x86_64-linux-gnu", Mode: "drwxr-xr-x"},
		{Name: "usr/lib/x86_64-linux-gnu/libibverbs.so.1", Mode: "lrwxrwxrwx", Target: "libibverbs.so.1.14.44.0"},
		{Name: "usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0", Mode: "-rw-r--r--"},
		{Name: "usr/sbin", Mode: "drwxr-xr-x"},
		{Name: "usr/sbin/ip", Mode: "-rwxr-x---"},
		{Name: "var", Mode: "drwxr-xr-x"},
		{Name: "var/empty", Mode: "-rw-------"},
	}
	if diff := cmp.Diff(want, listCPIO(t, archive)); diff != "" {
		t.Errorf("archive members (-want +got):\n%s", diff)
	}

	out := extractCPIO(t, archive)
	for _, name := range []string{"etc/modprobe.d/rdma.conf", "usr/bin/busybox", "usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0", "usr/sbin/ip", "var/empty"} {
		wantBody, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Errorf("extracted archive: %v", err)
			continue
		}
		if !bytes.Equal(got, wantBody) {
			t.Errorf("%s holds %d bytes %.20q, want %d bytes %.20q", name, len(got), got, len(wantBody), wantBody)
		}
	}
	for name, target := range map[string]string{"usr/bin/ip": "../sbin/ip", "usr/lib/x86_64-linux-gnu/libibverbs.so.1": "libibverbs.so.1.14.44.0"} {
		got, err := os.Readlink(filepath.Join(out, name))
		if err != nil || got != target {
			t.Errorf("extracted %s -> %q (%v), want -> %q", name, got, err, target)
		}
	}
}

// buildInitramfs writes an initramfs from two trees that share usr/lib and
// one file, as Build does with the userspace and module trees.
func buildInitramfs(t *testing.T) (archive, user, mods string) {
	t.Helper()
	user, mods = t.TempDir(), t.TempDir()
	makeTree(t, user, []treeEntry{
		{name: "usr/bin/busybox", mode: 0o755, body: "busybox"},
		{name: "usr/bin/rdma", mode: 0o755, body: "rdma"},
		{name: "usr/lib/x86_64-linux-gnu/libc.so.6", mode: 0o755, body: "libc"},
		{name: "usr/lib/shared.txt", mode: 0o644, body: "from the userspace tree"},
	})
	makeTree(t, mods, []treeEntry{
		{name: "usr/lib/modules/6.1.0-56-amd64/kernel/drivers/infiniband/core/ib_core.ko", mode: 0o644, body: "ib_core"},
		{name: "usr/lib/modules/6.1.0-56-amd64/modules.dep", mode: 0o644, body: "kernel/drivers/infiniband/core/ib_core.ko:\n"},
		{name: "usr/lib/shared.txt", mode: 0o644, body: "from the module tree"},
	})
	archive = filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := writeInitramfs(archive, "6.1", "6.1.0-56-amd64", []string{"ib_core", "rdma_rxe"}, user, mods); err != nil {
		t.Fatal(err)
	}
	return archive, user, mods
}

func TestWriteInitramfs(t *testing.T) {
	t.Parallel()
	needCPIO(t)
	archive, user, mods := buildInitramfs(t)
	entries := listCPIO(t, archive)

	byName := map[string]cpioEntry{}
	for _, e := range entries {
		if _, dup := byName[e.Name]; dup {
			t.Errorf("%s is in the archive twice", e.Name)
		}
		if parent := path.Dir(e.Name); parent != "." {
			p, ok := byName[parent]
			switch {
			case !ok:
				t.Errorf("%s comes before its parent %s", e.Name, parent)
			case p.Mode[0] != 'd':
				t.Errorf("%s lies below %s, which is %s, not a directory", e.Name, parent, p.Mode)
			}
		}
		byName[e.Name] = e
	}

	wantEntries := []cpioEntry{
		{Name: "init", Mode: "-rwxr-xr-x"},
		{Name: "bin", Mode: "lrwxrwxrwx", Target: "usr/bin"},
		{Name: "sbin", Mode: "lrwxrwxrwx", Target: "usr/sbin"},
		{Name: "lib", Mode: "lrwxrwxrwx", Target: "usr/lib"},
		{Name: "lib64", Mode: "lrwxrwxrwx", Target: "usr/lib64"},
		{Name: "usr/bin/sh", Mode: "lrwxrwxrwx", Target: "busybox"},
		{Name: "usr/bin/busybox", Mode: "-rwxr-xr-x"},
		{Name: "usr/lib64", Mode: "drwxr-xr-x"},
		{Name: "etc/vmtest/kernel", Mode: "-rw-r--r--"},
		{Name: "etc/vmtest/modules", Mode: "-rw-r--r--"},
		{Name: "etc/passwd", Mode: "-rw-r--r--"},
		{Name: "usr/lib/modules/6.1.0-56-amd64/modules.dep", Mode: "-rw-r--r--"},
	}
	for _, name := range []string{"proc", "sys", "dev", "tmp", "run", "root", "var/tmp", "opt/busybox"} {
		wantEntries = append(wantEntries, cpioEntry{Name: name, Mode: "drwxr-xr-x"})
	}
	for _, want := range wantEntries {
		got, ok := byName[want.Name]
		if !ok {
			t.Errorf("/%s is missing from the archive", want.Name)
			continue
		}
		if got != want {
			t.Errorf("/%s is %+v, want %+v", want.Name, got, want)
		}
	}

	out := extractCPIO(t, archive)
	files := []struct {
		name string
		want string
	}{
		{"init", initScript},
		{"etc/vmtest/kernel", "6.1 6.1.0-56-amd64\n"},
		{"etc/vmtest/modules", "ib_core\nrdma_rxe\n"},
		{"etc/hostname", "vmtest\n"},
		{"usr/bin/rdma", "rdma"},
		{"usr/lib/x86_64-linux-gnu/libc.so.6", "libc"},
		{"usr/lib/modules/6.1.0-56-amd64/kernel/drivers/infiniband/core/ib_core.ko", "ib_core"},
		{"usr/lib/shared.txt", "from the userspace tree"}, // the first tree wins
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(out, f.name))
		if err != nil {
			t.Errorf("extracted archive: %v", err)
			continue
		}
		if string(got) != f.want {
			t.Errorf("/%s = %q, want %q", f.name, got, f.want)
		}
	}
	if !strings.HasPrefix(initScript, "#!") {
		t.Errorf("/init starts with %.20q, want a #! line", initScript)
	}

	// The same inputs give the same bytes.
	again := filepath.Join(t.TempDir(), "again.cpio")
	if err := writeInitramfs(again, "6.1", "6.1.0-56-amd64", []string{"ib_core", "rdma_rxe"}, user, mods); err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two archives of the same trees differ (%d and %d bytes)", len(a), len(b))
	}
}

func TestCPIOWriterFraming(t *testing.T) {
	t.Parallel()
	// Names and bodies of every length modulo 4 exercise the padding; the
	// kernel's unpacker, like cpio, needs each header on a 4-byte boundary.
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	for i := range 8 {
		name := "d/" + strings.Repeat("n", i+1)
		if err := c.file(name, 0o644, []byte(strings.Repeat("b", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	var names []string
	for off := 0; ; {
		if off%4 != 0 {
			t.Fatalf("header at offset %d is not 4-byte aligned", off)
		}
		if off+110 > len(raw) || string(raw[off:off+6]) != "070701" {
			t.Fatalf("no newc header at offset %d", off)
		}
		size := hexField(t, raw[off+54:off+62])
		nameSize := hexField(t, raw[off+94:off+102])
		name := string(raw[off+110 : off+110+nameSize-1])
		if raw[off+110+nameSize-1] != 0 {
			t.Fatalf("name %q at offset %d is not NUL-terminated", name, off)
		}
		names = append(names, name)
		off = align4(off + 110 + nameSize)
		off = align4(off + size)
		if name == "TRAILER!!!" {
			if off != len(raw) {
				t.Errorf("%d bytes after the trailer", len(raw)-off)
			}
			break
		}
	}
	want := []string{"d", "d/n", "d/nn", "d/nnn", "d/nnnn", "d/nnnnn", "d/nnnnnn", "d/nnnnnnn", "d/nnnnnnnn", "TRAILER!!!"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
}

func align4(n int) int { return (n + 3) &^ 3 }

func hexField(t *testing.T, b []byte) int {
	t.Helper()
	n, err := strconv.ParseUint(string(b), 16, 32)
	if err != nil {
		t.Fatalf("header field %q: %v", b, err)
	}
	return int(n)
}
