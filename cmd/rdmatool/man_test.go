package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A page already in DIR as a link is replaced, not written through: as
// root, docs man into a directory someone else can write must not
// overwrite the file a planted link points at.
func TestDocsManReplacesLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "rdmatool.8")); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "docs", "man", dir); code != 0 {
		t.Fatalf("docs man: exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep\n" {
		t.Errorf("the link's target holds %q (%v), want it untouched", b, err)
	}
	fi, err := os.Lstat(filepath.Join(dir, "rdmatool.8"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("rdmatool.8: %v, %v: want a regular file, mode 0644", fi, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestManRoff(t *testing.T) {
	t.Parallel()
	md := "First `--max-qp\nDEV=N` and **bold**.\n.dot at a line's start\n\n## A heading\n\n- one\n  continued\n- two \\ back\n\n    indented block\n    .ds x\n\n```\nfenced\n```\n"
	want := ".PP\nFirst \\fB--max-qp\nDEV=N\\fP and \\fBbold\\fP.\n\\&.dot at a line's start\n" +
		".SS A heading\n" +
		".IP \\(bu 2\none\ncontinued\n.IP \\(bu 2\ntwo \\e back\n" +
		".PP\n.RS\n.nf\nindented block\n\\&.ds x\n.fi\n.RE\n" +
		".PP\n.RS\n.nf\nfenced\n.fi\n.RE\n"
	if got := manRoff(md); got != want {
		t.Errorf("manRoff:\n got %q\nwant %q", got, want)
	}
	if strings.Contains(manQuote(`a "b"`), `"b"`) {
		t.Errorf("manQuote leaves quotes inside: %s", manQuote(`a "b"`))
	}
}
