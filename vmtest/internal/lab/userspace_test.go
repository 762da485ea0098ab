package lab

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUsrPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rel  string
		want string
	}{
		{"bin", "usr/bin"},
		{"bin/busybox", "usr/bin/busybox"},
		{"sbin/modprobe", "usr/sbin/modprobe"},
		{"lib", "usr/lib"},
		{"lib/x86_64-linux-gnu/libkmod.so.2", "usr/lib/x86_64-linux-gnu/libkmod.so.2"},
		{"lib64/ld-linux-x86-64.so.2", "usr/lib64/ld-linux-x86-64.so.2"},
		{"usr/bin/ibv_devices", "usr/bin/ibv_devices"},
		{"usr/lib/x86_64-linux-gnu/libibverbs.so.1", "usr/lib/x86_64-linux-gnu/libibverbs.so.1"},
		{"etc/libibverbs.d/rxe.driver", "etc/libibverbs.d/rxe.driver"},
		{"binutils/x", "binutils/x"},
		{"library/x", "library/x"},
		{"lib32/x", "lib32/x"},
		{"libexec/x", "libexec/x"},
	}
	for _, tt := range tests {
		if got := usrPath(tt.rel); got != tt.want {
			t.Errorf("usrPath(%q) = %q, want %q", tt.rel, got, tt.want)
		}
	}
}

// describeTree maps every path below root to "dir", "file MODE BODY" or
// "-> TARGET".
func describeTree(t *testing.T, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		switch {
		case d.IsDir():
			got[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			got[rel] = "-> " + target
		default:
			fi, err := d.Info()
			if err != nil {
				return err
			}
			body, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			got[rel] = fmt.Sprintf("file %04o %s", fi.Mode().Perm(), body)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestCopyMergedUsr(t *testing.T) {
	t.Parallel()
	// An unpacked set of packages in the old layout (kmod, libkmod2,
	// busybox-static, rdma-core) with docs, man pages and units.
	root := t.TempDir()
	makeTree(t, root, []treeEntry{
		{name: "bin/busybox", mode: 0o755, body: "busybox"},
		{name: "bin/kmod", mode: 0o755, body: "kmod"},
		{name: "sbin/modprobe", body: "-> /bin/kmod"},
		{name: "sbin/depmod", body: "-> ../bin/kmod"},
		{name: "lib/x86_64-linux-gnu/libkmod.so.2.4.0", mode: 0o644, body: "libkmod"},
		{name: "lib/x86_64-linux-gnu/libkmod.so.2", body: "-> libkmod.so.2.4.0"},
		{name: "lib/systemd/system/kmod.service", mode: 0o644, body: "[Unit]"},
		{name: "lib/modprobe.d/aliases.conf", mode: 0o644, body: "alias"},
		{name: "lib64/ld-linux-x86-64.so.2", body: "-> /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{name: "usr/bin/ibv_devices", mode: 0o755, body: "ibv_devices"},
		{name: "usr/sbin/rdma-ndd", mode: 0o750, body: "rdma-ndd"},
		{name: "usr/lib/systemd/system/rdma-ndd.service", mode: 0o644, body: "[Unit]"},
		{name: "usr/share/doc/kmod/copyright", mode: 0o644, body: "GPL"},
		{name: "usr/share/doc-base/kmod", mode: 0o644, body: "doc-base"},
		{name: "usr/share/man/man8/modprobe.8.gz", mode: 0o644, body: "man"},
		{name: "usr/share/locale/de/LC_MESSAGES/kmod.mo", mode: 0o644, body: "de"},
		{name: "usr/share/lintian/overrides/kmod", mode: 0o644, body: "lintian"},
		{name: "usr/share/bash-completion/completions/kmod", mode: 0o644, body: "complete"},
		{name: "usr/share/zsh/vendor-completions/_kmod", mode: 0o644, body: "compdef"},
		{name: "usr/share/rdma-core/udev-rules", mode: 0o644, body: "rules"},
		{name: "etc/init.d/kmod", mode: 0o755, body: "#!/bin/sh"},
		{name: "etc/systemd/system/x.service", mode: 0o644, body: "[Unit]"},
		{name: "etc/libibverbs.d/rxe.driver", mode: 0o644, body: "driver rxe"},
		{name: "etc/modprobe.d/", mode: 0o755},
	})
	tree := filepath.Join(t.TempDir(), "tree")
	if err := copyMergedUsr(root, tree); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"usr":                                   "dir",
		"usr/bin":                               "dir",
		"usr/bin/busybox":                       "file 0755 busybox",
		"usr/bin/kmod":                          "file 0755 kmod",
		"usr/bin/ibv_devices":                   "file 0755 ibv_devices",
		"usr/sbin":                              "dir",
		"usr/sbin/modprobe":                     "-> /bin/kmod",
		"usr/sbin/depmod":                       "-> ../bin/kmod",
		"usr/sbin/rdma-ndd":                     "file 0750 rdma-ndd",
		"usr/lib":                               "dir",
		"usr/lib/x86_64-linux-gnu":              "dir",
		"usr/lib/x86_64-linux-gnu/libkmod.so.2": "-> libkmod.so.2.4.0",
		"usr/lib/x86_64-linux-gnu/libkmod.so.2.4.0": "file 0644 libkmod",
		"usr/lib/modprobe.d":                        "dir",
		"usr/lib/modprobe.d/aliases.conf":           "file 0644 alias",
		"usr/lib64":                                 "dir",
		"usr/lib64/ld-linux-x86-64.so.2":            "-> /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		"usr/share":                                 "dir",
		"usr/share/doc-base":                        "dir",
		"usr/share/doc-base/kmod":                   "file 0644 doc-base",
		"usr/share/rdma-core":                       "dir",
		"usr/share/rdma-core/udev-rules":            "file 0644 rules",
		"etc":                                       "dir",
		"etc/libibverbs.d":                          "dir",
		"etc/libibverbs.d/rxe.driver":               "file 0644 driver rxe",
		"etc/modprobe.d":                            "dir",
	}
	if diff := cmp.Diff(want, describeTree(t, tree)); diff != "" {
		t.Errorf("merged tree (-want +got):\n%s", diff)
	}

	// A second package set over the same tree replaces symlinks and files.
	root2 := t.TempDir()
	makeTree(t, root2, []treeEntry{
		{name: "sbin/modprobe", body: "-> kmod-new"},
		{name: "bin/kmod", mode: 0o755, body: "kmod 2"},
	})
	if err := copyMergedUsr(root2, tree); err != nil {
		t.Fatalf("copying a second tree over the first: %v", err)
	}
	want["usr/sbin/modprobe"] = "-> kmod-new"
	want["usr/bin/kmod"] = "file 0755 kmod 2"
	if diff := cmp.Diff(want, describeTree(t, tree)); diff != "" {
		t.Errorf("tree after the second copy (-want +got):\n%s", diff)
	}
}
