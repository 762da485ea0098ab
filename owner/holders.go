package owner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DevNum is a character device number as stat(2) reports it (st_rdev).
type DevNum struct{ Major, Minor uint32 }

func (d DevNum) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// ParseDevNum parses a device number as sysfs writes it in a "dev"
// attribute: "231:192", with or without the trailing newline.
func ParseDevNum(s string) (DevNum, error) {
	major, minor, ok := strings.Cut(strings.TrimSpace(s), ":")
	if ok {
		a, err1 := strconv.ParseUint(major, 10, 32)
		b, err2 := strconv.ParseUint(minor, 10, 32)
		if err1 == nil && err2 == nil {
			return DevNum{uint32(a), uint32(b)}, nil
		}
	}
	return DevNum{}, fmt.Errorf("owner: %q is not a device number (MAJOR:MINOR)", s)
}

// OpenFile is one open character device of a Holder.
type OpenFile struct {
	FD int
	// Path is the path the process opened it by, as /proc/PID/fd shows it
	// (from the process's own mount namespace), without " (deleted)".
	Path string
	Dev  DevNum
	// Deleted says the device node was unlinked after the open: for a
	// uverbs device, that its device was unregistered while the process
	// held it.
	Deleted bool
}

// Holder is a process with character devices of interest open.
type Holder struct {
	Process            // TID and PID are both the process id
	Files   []OpenFile // sorted by FD
}

// HolderScan is the outcome of one scan of /proc.
type HolderScan struct {
	Holders []Holder // sorted by PID
	// Unreadable lists the processes whose fd table could not be read
	// (no privilege: reading another user's /proc/PID/fd takes
	// CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE, as root has them), sorted. When it is not empty the scan may
	// have missed holders: "no holders" must not be concluded from it.
	Unreadable []uint32
}

// deletedSuffix is what the kernel appends to an fd's link target when
// the file's name was unlinked after the open.
const deletedSuffix = " (deleted)"

// Holders scans procRoot/*/fd for open character devices; want picks those
// of interest. Processes that exit during the scan are skipped.
//
// The fd walk is written here rather than taken from procfs: its
// FileDescriptorTargets reads the fd directory and the links in separate
// passes and returns no fd numbers, and it does not stat the targets,
// which is how a device is recognised whatever path a container mounted it
// under.
func Holders(procRoot string, want func(OpenFile) bool) (HolderScan, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return HolderScan{}, fmt.Errorf("owner: holders: %w", err)
	}
	res, err := NewResolver(procRoot)
	if err != nil {
		return HolderScan{}, err
	}
	var scan HolderScan
	for _, e := range ents {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue
		}
		files, err := openCharDevs(filepath.Join(procRoot, e.Name(), "fd"), want)
		switch {
		case errors.Is(err, fs.ErrPermission):
			scan.Unreadable = append(scan.Unreadable, uint32(pid))
			continue
		case err != nil || len(files) == 0:
			continue // gone, or holds nothing of interest
		}
		proc, ok := res.Lookup(uint32(pid))
		if !ok {
			continue // exited since
		}
		proc.TID = proc.PID
		scan.Holders = append(scan.Holders, Holder{Process: proc, Files: files})
	}
	slices.SortFunc(scan.Holders, func(a, b Holder) int { return int(a.PID) - int(b.PID) })
	slices.Sort(scan.Unreadable)
	return scan, nil
}

// openCharDevs lists the wanted character devices open in one fd directory.
func openCharDevs(dir string, want func(OpenFile) bool) ([]OpenFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []OpenFile
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link := filepath.Join(dir, e.Name())
		target, err := os.Readlink(link)
		// Sockets, pipes and anon inodes read "type:[inode]"; only a path
		// can be a device node, which spares a stat for every socket.
		if err != nil || !strings.HasPrefix(target, "/") {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(link, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		path, deleted := strings.CutSuffix(target, deletedSuffix)
		f := OpenFile{
			FD:      fd,
			Path:    path,
			Dev:     DevNum{unix.Major(st.Rdev), unix.Minor(st.Rdev)},
			Deleted: deleted,
		}
		if want(f) {
			files = append(files, f)
		}
	}
	slices.SortFunc(files, func(a, b OpenFile) int { return a.FD - b.FD })
	return files, nil
}
