package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/rdmatool/rdmatool/vmtest/internal/lab"
)

// job is a line of a jobs file: a guest run whose output goes to log.
type job struct {
	log, kernel string
	system      bool
	oneThread   bool     // the guest's vCPUs on one host thread (GUEST/1)
	env         []string // KEY=VALUE words before the command
	command     []string
}

// parseJobs reads a jobs file: a line per guest run, "LOG KERNEL GUEST
// [KEY=VALUE]... COMMAND [ARG]...", GUEST lab or system, and lab/1 or
// system/1 for a guest whose vCPUs run on one host thread (vmlab run
// -one-thread); fields apart by blanks (no quoting); blank lines and lines
// starting with # are skipped.
func parseJobs(r io.Reader) ([]job, error) {
	var jobs []job
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 4 {
			return nil, fmt.Errorf("jobs line %d: %d fields, want LOG KERNEL GUEST COMMAND", n, len(f))
		}
		j := job{log: f[0], kernel: f[1]}
		guest, threads, hasThreads := strings.Cut(f[2], "/")
		switch {
		case guest != "lab" && guest != "system" || hasThreads && threads != "1":
			return nil, fmt.Errorf("jobs line %d: guest %q, want lab or system, or lab/1 or system/1 (one host thread)", n, f[2])
		case guest == "system":
			j.system = true
		}
		j.oneThread = hasThreads
		if _, err := lab.LookupKernel(j.kernel); err != nil {
			return nil, fmt.Errorf("jobs line %d: %w", n, err)
		}
		rest := f[3:]
		for len(rest) > 0 && strings.Contains(rest[0], "=") && !strings.HasPrefix(rest[0], "=") {
			j.env = append(j.env, rest[0])
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return nil, fmt.Errorf("jobs line %d: no command", n)
		}
		j.command = rest
		jobs = append(jobs, j)
	}
	return jobs, sc.Err()
}

// progress is what a job's output shows on the terminal as it runs: go
// test's ok/FAIL lines (labtests.sh, systemtests.sh), failed tests,
// panics, and vmlab's and the lab's own lines.
var progress = regexp.MustCompile(`^(ok  |FAIL|reboot)\t|^--- FAIL|^panic: |^vmlab: |^lab: `)

// jobOutput writes a job's output to its log and its progress lines,
// prefixed with the job's name, to the shared terminal.
type jobOutput struct {
	log  io.Writer
	name string
	term io.Writer
	mu   *sync.Mutex // the terminal's
	buf  []byte
}

func (o *jobOutput) Write(p []byte) (int, error) {
	if _, err := o.log.Write(p); err != nil {
		return 0, err
	}
	o.buf = append(o.buf, p...)
	for {
		i := bytes.IndexByte(o.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimRight(string(o.buf[:i]), "\r")
		o.buf = o.buf[i+1:]
		if progress.MatchString(line) {
			o.mu.Lock()
			fmt.Fprintf(o.term, "%s: %s\n", o.name, line)
			o.mu.Unlock()
		}
	}
}

// runJobs runs the jobs' guests, in the order given, as many at once as
// the lab's budget of host CPUs holds: each waits for its CPUs in turn
// (first come, first served), then runs while the next waits. Each job's
// status goes to LOG.status ("error" when the guest reported none). It
// returns the jobs that failed.
func runJobs(ctx context.Context, jobs []job, start func(job) (lab.RunSpec, error), budget int, timesFile string, term io.Writer) []job {
	sem := semaphore.NewWeighted(int64(budget))
	var (
		wg     sync.WaitGroup
		termMu sync.Mutex
		mu     sync.Mutex
		failed []job
	)
	fail := func(j job, status string) {
		_ = os.WriteFile(j.log+".status", []byte(status+"\n"), 0o644) // the run's failure is what is reported
		mu.Lock()
		failed = append(failed, j)
		mu.Unlock()
	}
	name := func(j job) string { return strings.TrimSuffix(filepath.Base(j.log), ".log") }
	began := time.Now()
	for _, j := range jobs {
		spec, err := start(j)
		if err != nil {
			fmt.Fprintf(term, "%s: vmlab: %v\n", name(j), err)
			fail(j, "error")
			continue
		}
		n := int64(min(spec.HostThreads(), budget))
		if err := sem.Acquire(ctx, n); err != nil {
			fail(j, "error")
			continue
		}
		queued := time.Since(began) // behind the jobs before it
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sem.Release(n)
			f, err := os.Create(j.log)
			if err != nil {
				fmt.Fprintf(term, "%s: vmlab: %v\n", name(j), err)
				fail(j, "error")
				return
			}
			out := &jobOutput{log: f, name: name(j), term: term, mu: &termMu}
			spec.Stdout = out
			spec.Stats = &lab.RunStats{Queued: queued}
			status, err := lab.Run(ctx, spec)
			guest := "lab"
			if j.system {
				guest = "system"
			}
			if g, ok := strings.CutPrefix(name(j), j.kernel+"-"); ok { // KERNEL-GROUP.log
				guest += " " + g
			}
			if spec.Stats.Boots > 0 {
				report(out, j.kernel, guest, spec.Stats, status, err, timesFile)
			}
			if err != nil {
				fmt.Fprintf(out, "vmlab: %v\n", err)
			}
			if cerr := f.Close(); cerr != nil && err == nil {
				err = cerr
				fmt.Fprintf(term, "%s: vmlab: %v\n", name(j), err)
			}
			if err != nil {
				fail(j, "error")
				return
			}
			if status != 0 {
				fail(j, strconv.Itoa(status))
				return
			}
			_ = os.WriteFile(j.log+".status", []byte("0\n"), 0o644) // a missing status reads as a failure
		}()
	}
	wg.Wait()
	return failed
}
