package lab

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

//go:embed init.sh
var initScript string

// cpioWriter writes a newc ("070701") archive, the format the kernel unpacks
// into the initial rootfs. Entries are written with fixed owners and times so
// the same inputs give the same archive.
type cpioWriter struct {
	w    *bufio.Writer
	ino  uint32
	seen map[string]bool
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), seen: map[string]bool{}}
}

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
)

func (c *cpioWriter) header(name string, mode uint32, size int) error {
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	_, err := fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if err != nil {
		return err
	}
	if _, err := c.w.WriteString(name + "\x00"); err != nil {
		return err
	}
	return c.pad(110 + len(name) + 1)
}

func (c *cpioWriter) pad(n int) error {
	if r := n % 4; r != 0 {
		_, err := c.w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}

// dir writes a directory and, first, any parent not yet written.
func (c *cpioWriter) dir(name string, perm uint32) error {
	if name == "." || name == "" || c.seen[name] {
		return nil
	}
	if err := c.dir(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	c.seen[name] = true
	return c.header(name, cpioDir|perm, 0)
}

func (c *cpioWriter) data(name string, mode uint32, body []byte) error {
	if c.seen[name] {
		return nil
	}
	if err := c.dir(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	c.seen[name] = true
	if err := c.header(name, mode, len(body)); err != nil {
		return err
	}
	if _, err := c.w.Write(body); err != nil {
		return err
	}
	return c.pad(len(body))
}

func (c *cpioWriter) file(name string, perm uint32, body []byte) error {
	return c.data(name, cpioFile|perm, body)
}

func (c *cpioWriter) symlink(name, target string) error {
	return c.data(name, cpioSymlink|0o777, []byte(target))
}

// tree adds every directory, file and symlink below root.
func (c *cpioWriter) tree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name, _ := filepath.Rel(root, path)
		if name == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return c.dir(name, uint32(fi.Mode().Perm()))
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return c.symlink(name, target)
		case d.Type().IsRegular():
			body, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return c.file(name, uint32(fi.Mode().Perm()), body)
		}
		return nil
	})
}

func (c *cpioWriter) close() error {
	if err := c.header("TRAILER!!!", 0, 0); err != nil {
		return err
	}
	return c.w.Flush()
}

// writeInitramfs packs the guest: /init, the userspace and module trees, and
// the facts /init reads (/etc/vmtest/kernel and /etc/vmtest/modules).
func writeInitramfs(path, kernel, release string, modules []string, trees ...string) error {
	return writeArchive(path, initScript, kernel, release, modules, trees...)
}

// writeArchive is writeInitramfs with init as /init (the system guest's
// initramfs has one of its own).
func writeArchive(path, init, kernel, release string, modules []string, trees ...string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	c := newCPIOWriter(f)
	err = func() error {
		for _, l := range []struct{ name, target string }{
			{"bin", "usr/bin"}, {"sbin", "usr/sbin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"},
			{"usr/bin/sh", "busybox"},
		} {
			if err := c.symlink(l.name, l.target); err != nil {
				return err
			}
		}
		for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "mnt", "root", "var/tmp", "opt/busybox", "usr/local/bin", "usr/lib64"} {
			if err := c.dir(d, 0o755); err != nil {
				return err
			}
		}
		files := []struct {
			name string
			perm uint32
			body string
		}{
			{"init", 0o755, init},
			{"etc/vmtest/kernel", 0o644, kernel + " " + release + "\n"},
			{"etc/vmtest/modules", 0o644, strings.Join(modules, "\n") + "\n"},
			{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
			{"etc/group", 0o644, "root:x:0:\nnogroup:x:65534:\n"},
			{"etc/hostname", 0o644, "vmtest\n"},
		}
		for _, fl := range files {
			if err := c.file(fl.name, fl.perm, []byte(fl.body)); err != nil {
				return err
			}
		}
		for _, t := range trees {
			if err := c.tree(t); err != nil {
				return err
			}
		}
		return c.close()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
