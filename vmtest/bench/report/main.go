// Command report turns make bench's logs into tables per kernel, a JSON
// file for comparison across commits, and a PNG plot of QP dump time against
// the number of QPs (drawn by gnuplot).
//
//	report [-json FILE] [-plot FILE] [-gobench FILE] [-date D] [-commit C] LOG...
//
// Each LOG is the output of one guest run of vmtest/bench/qp-dump.sh (or of
// trace-overhead.sh); -gobench is the output of go test -bench -benchmem.
// Logs from before the MR measurements (no "mr-" lines) give the tables
// they gave then.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the JSON file's content.
type Report struct {
	Date         string      `json:"date"`
	Commit       string      `json:"commit"`
	Kernels      []KernelRun `json:"kernels"`
	GoBenchmarks []GoBench   `json:"go_benchmarks"`
}

// KernelRun is one guest run.
type KernelRun struct {
	Kernel  string `json:"kernel"`
	Release string `json:"release"`
	Sizes   []Size `json:"sizes"`
	// Rename holds the udev renames of one device, start to exit, by
	// program: rdmatool, rdma_rename.
	Rename map[string]Timing `json:"rename"`
	// Probes is the summary vmtest/bench/trace-overhead.sh printed, line
	// by line (empty when BENCH_TRACE=no).
	Probes []string `json:"probes,omitempty"`
	// MRSizes holds the MR listings, by number of MRs held beside the
	// QPs of the largest size (none in a log from before them).
	MRSizes []MRSize `json:"mr_sizes"`
	// AgentMRs is the agent with those QPs and the most MRs tracked (nil
	// when no MR was held).
	AgentMRs *AgentMRs `json:"agent_mrs,omitempty"`
}

// MRSize holds what was measured with one number of MRs held.
type MRSize struct {
	MRs int `json:"mrs"`
	// QPs held beside them.
	QPs int `json:"qps"`
	// Timings by label: floor, rdmatool, rdmatool-text, iproute2 (the
	// log's "mr-<label> <MRs>" lines).
	Timings        map[string]Timing `json:"timings"`
	FloorDatagrams int               `json:"floor_datagrams"`
	FloorBytes     int               `json:"floor_bytes"`
}

// AgentMRs is the agent with QPs and MRs held, every one tracked.
type AgentMRs struct {
	QPs int `json:"qps"`
	MRs int `json:"mrs"`
	// Catching up: from when the agent ran again (it was stopped while
	// the MRs were registered) until its metrics counted them: the wall
	// seconds, its CPU seconds, and the MR and QP dumps it made.
	CatchUpSeconds    int     `json:"catch_up_seconds"`
	CatchUpCPUSeconds float64 `json:"catch_up_cpu_seconds"`
	CatchUpMRDumps    int     `json:"catch_up_mr_dumps"`
	CatchUpScans      int     `json:"catch_up_scans"`
	// Its RSS and peak RSS then.
	RSSKiB int `json:"rss_kib"`
	HWMKiB int `json:"hwm_kib"`
	// At idle (asked nothing; no resource summary read while the probes
	// count no change): the window, its CPU over it as a fraction of one CPU,
	// its RSS at the end, and the MR and QP dumps it made in it, with its
	// --reconcile (at most one of each per reconcile is expected).
	IdleSeconds      int     `json:"idle_seconds"`
	IdleCPU          float64 `json:"idle_cpu"`
	IdleRSSKiB       int     `json:"idle_rss_kib"`
	IdleMRDumps      int     `json:"idle_mr_dumps"`
	IdleScans        int     `json:"idle_scans"`
	ReconcileSeconds int     `json:"reconcile_seconds"`
}

// Size holds what was measured with one number of QPs held.
type Size struct {
	QPs int `json:"qps"`
	// Timings by label: floor, rdmatool, rdmatool-text, iproute2,
	// qp-leaks-netlink, qp-leaks-probes, qp-leaks-agent.
	Timings        map[string]Timing `json:"timings"`
	FloorDatagrams int               `json:"floor_datagrams"`
	FloorBytes     int               `json:"floor_bytes"`
	AnswerBytes    map[string]int    `json:"answer_bytes"`
	AgentRSSKiB    int               `json:"agent_rss_kib"`
	AgentHWMKiB    int               `json:"agent_hwm_kib"`
	// The agent at idle (asked nothing, scanning every --interval): its
	// CPU over the window as a fraction of one CPU, its RSS at the end.
	AgentIdleCPU    float64 `json:"agent_idle_cpu"`
	AgentIdleRSSKiB int     `json:"agent_idle_rss_kib"`
	// AgentIdleQPDumps is the QP dumps of rxe0 the agent made in the
	// window (its --reconcile's, when one came due then); -1 when the log
	// does not say (before the bench counted them).
	AgentIdleQPDumps int `json:"agent_idle_qp_dumps"`
	// AgentLostEvents is the probe events the agent had lost (its ring
	// buffer full) since it started, read after the idle window.
	AgentLostEvents int `json:"agent_lost_events"`
	// Under paced QP churn (about 1,000 probe events a second): the
	// events a second the churn made (six per cycle), and the CPU the
	// agent and a JSON reader (rdmatool trace -j) used, as fractions of
	// one CPU.
	ChurnEventsPerSec float64 `json:"churn_events_per_sec,omitempty"`
	AgentChurnCPU     float64 `json:"agent_churn_cpu,omitempty"`
	ReaderChurnCPU    float64 `json:"reader_churn_cpu,omitempty"`
}

// Timing is one labtime line.
type Timing struct {
	Runs          int     `json:"runs"`
	MinSeconds    float64 `json:"min_seconds"`
	MedianSeconds float64 `json:"median_seconds"`
	MaxSeconds    float64 `json:"max_seconds"`
	MaxRSSKiB     int     `json:"max_rss_kib"`
}

// GoBench is one go test -bench result line.
type GoBench struct {
	Name    string  `json:"name"`
	NsPerOp float64 `json:"ns_per_op"`
	NsPerQP float64 `json:"ns_per_qp"`
	// HeapPerQP is the heap kept per tracked QP (BenchmarkTrack).
	HeapPerQP   float64 `json:"heap_bytes_per_qp"`
	BytesPerOp  int     `json:"bytes_per_op"`
	AllocsPerOp int     `json:"allocs_per_op"`
}

var (
	kernelLine  = regexp.MustCompile(`^== kernel (\S+) \((\S+)\)`)
	labtimeLine = regexp.MustCompile(`^(\S+) (\d+)\s+runs (\d+)\s+wall min ([0-9.]+)s median ([0-9.]+)s max ([0-9.]+)s\s+maxrss (\d+) KiB`)
	// nlfloor -v: it names the resource dumped (QPs, MRs); a log from
	// before the MR floor names none, and means QPs.
	floorLine = regexp.MustCompile(`^nlfloor: \d+ devices, (\d+) datagrams, \d+ messages, (\d+) bytes(?: \(buffer \d+, (\w+)\))?`)
	heldLine  = regexp.MustCompile(`^held (\d+) QPs`)
	sizeLine  = regexp.MustCompile(`^size (\S+) (\d+) (\d+)`)
	agentLine = regexp.MustCompile(`^agent (\d+) .*VmHWM: (\d+) kB.*VmRSS: (\d+) kB`)
	idleWork  = regexp.MustCompile(`^idle-work (\d+) after .*"lost_events":(\d+)`)
	idleLine  = regexp.MustCompile(`^idle (\d+) ticks (\d+) hz (\d+) seconds (\d+) rss (\d+) kB`)
	idleDumps = regexp.MustCompile(`^idle-dumps (\d+) (-?\d+)`)
	churnLine = regexp.MustCompile(`^churn (\d+) cycles (\d+) seconds ([0-9.]+) agent-ticks (\d+) reader-ticks (\d+) hz (\d+)`)
	// the MR part's lines
	mrHeldLine    = regexp.MustCompile(`^mr-held (\d+) MRs in \d+ processes, beside (\d+) QPs`)
	mrCatchUpLine = regexp.MustCompile(`^mr-catchup (\d+) (\d+) ticks (\d+) hz (\d+) seconds (\d+) mr-dumps (-?\d+) scans (-?\d+)`)
	mrAgentLine   = regexp.MustCompile(`^mr-agent (\d+) (\d+) .*VmHWM: (\d+) kB.*VmRSS: (\d+) kB`)
	mrIdleLine    = regexp.MustCompile(`^mr-idle (\d+) (\d+) ticks (\d+) hz (\d+) seconds (\d+) rss (\d+) kB`)
	mrIdleWork    = regexp.MustCompile(`^mr-idle-work (\d+) (\d+) mr-dumps (-?\d+) scans (-?\d+) reconcile (\d+)`)
	// trace-overhead.sh's summary lines
	probeLine   = regexp.MustCompile(`^(median cycles/s|  probes|in-kernel probe time|highest churn)`)
	goBenchLine = regexp.MustCompile(`^(Benchmark\S+)\s+\d+\s+([0-9.]+) ns/op(?:\s+([0-9.]+) heap-B/qp)?(?:\s+([0-9.]+) ns/qp)?\s+(\d+) B/op\s+(\d+) allocs/op`)
)

func main() {
	jsonOut := flag.String("json", "", "write the report as JSON to this file")
	plotOut := flag.String("plot", "", "draw the QP dump plot (PNG) to this file with gnuplot")
	goBench := flag.String("gobench", "", "go test -bench output to include")
	date := flag.String("date", time.Now().UTC().Format("2006-01-02"), "date of the run")
	commit := flag.String("commit", "", "commit measured")
	flag.Parse()
	rep := Report{Date: *date, Commit: *commit, GoBenchmarks: []GoBench{}}
	for _, path := range flag.Args() {
		k, err := parseLog(path)
		if err != nil {
			fail(err)
		}
		if i := slices.IndexFunc(rep.Kernels, func(r KernelRun) bool { return r.Kernel == k.Kernel }); i >= 0 {
			// a kernel's second log: trace-overhead.sh's
			rep.Kernels[i].Probes = append(rep.Kernels[i].Probes, k.Probes...)
			continue
		}
		rep.Kernels = append(rep.Kernels, k)
	}
	if *goBench != "" {
		b, err := os.ReadFile(*goBench)
		if err != nil {
			fail(err)
		}
		rep.GoBenchmarks = parseGoBench(b)
	}
	printTables(os.Stdout, rep)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
	if *plotOut != "" {
		if err := plot(rep, *plotOut); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}

func atoi(s string) int     { n, _ := strconv.Atoi(s); return n }
func atof(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

func parseLog(path string) (KernelRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return KernelRun{}, err
	}
	defer f.Close() //nolint:errcheck // read only
	k, err := parseRun(f)
	if err != nil {
		return k, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// parseRun reads one guest run's log.
func parseRun(r io.Reader) (KernelRun, error) {
	k := KernelRun{Rename: map[string]Timing{}, MRSizes: []MRSize{}}
	size := func(n int) *Size {
		for i := range k.Sizes {
			if k.Sizes[i].QPs == n {
				return &k.Sizes[i]
			}
		}
		k.Sizes = append(k.Sizes, Size{QPs: n, Timings: map[string]Timing{}, AnswerBytes: map[string]int{}, AgentIdleQPDumps: -1})
		return &k.Sizes[len(k.Sizes)-1]
	}
	mrSize := func(n int) *MRSize {
		for i := range k.MRSizes {
			if k.MRSizes[i].MRs == n {
				return &k.MRSizes[i]
			}
		}
		k.MRSizes = append(k.MRSizes, MRSize{MRs: n, Timings: map[string]Timing{}})
		return &k.MRSizes[len(k.MRSizes)-1]
	}
	agentMRs := func(qps, mrs string) *AgentMRs {
		if k.AgentMRs == nil {
			k.AgentMRs = &AgentMRs{}
		}
		k.AgentMRs.QPs, k.AgentMRs.MRs = atoi(qps), atoi(mrs)
		return k.AgentMRs
	}
	held, mrsHeld := 0, 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := kernelLine.FindStringSubmatch(line); m != nil {
			k.Kernel, k.Release = m[1], m[2]
		} else if m := heldLine.FindStringSubmatch(line); m != nil {
			held = atoi(m[1])
		} else if m := mrHeldLine.FindStringSubmatch(line); m != nil {
			mrsHeld = atoi(m[1])
			mrSize(mrsHeld).QPs = atoi(m[2])
		} else if m := floorLine.FindStringSubmatch(line); m != nil {
			switch {
			case m[3] == "MRs" && mrsHeld > 0:
				s := mrSize(mrsHeld)
				s.FloorDatagrams, s.FloorBytes = atoi(m[1]), atoi(m[2])
			case m[3] != "MRs" && held > 0:
				s := size(held)
				s.FloorDatagrams, s.FloorBytes = atoi(m[1]), atoi(m[2])
			}
		} else if m := labtimeLine.FindStringSubmatch(line); m != nil {
			t := Timing{Runs: atoi(m[3]), MinSeconds: atof(m[4]), MedianSeconds: atof(m[5]), MaxSeconds: atof(m[6]), MaxRSSKiB: atoi(m[7])}
			if prog, ok := strings.CutPrefix(m[1], "rename-"); ok {
				k.Rename[prog] = t
			} else if label, ok := strings.CutPrefix(m[1], "mr-"); ok {
				mrSize(atoi(m[2])).Timings[label] = t
			} else {
				size(atoi(m[2])).Timings[m[1]] = t
			}
		} else if m := mrCatchUpLine.FindStringSubmatch(line); m != nil && atoi(m[4]) > 0 {
			a := agentMRs(m[1], m[2])
			a.CatchUpCPUSeconds = float64(atoi(m[3])) / float64(atoi(m[4]))
			a.CatchUpSeconds, a.CatchUpMRDumps, a.CatchUpScans = atoi(m[5]), atoi(m[6]), atoi(m[7])
		} else if m := mrAgentLine.FindStringSubmatch(line); m != nil {
			a := agentMRs(m[1], m[2])
			a.HWMKiB, a.RSSKiB = atoi(m[3]), atoi(m[4])
		} else if m := mrIdleLine.FindStringSubmatch(line); m != nil && atoi(m[4]) > 0 && atoi(m[5]) > 0 {
			a := agentMRs(m[1], m[2])
			a.IdleSeconds = atoi(m[5])
			a.IdleCPU = float64(atoi(m[3])) / float64(atoi(m[4])) / float64(a.IdleSeconds)
			a.IdleRSSKiB = atoi(m[6])
		} else if m := mrIdleWork.FindStringSubmatch(line); m != nil {
			a := agentMRs(m[1], m[2])
			a.IdleMRDumps, a.IdleScans, a.ReconcileSeconds = atoi(m[3]), atoi(m[4]), atoi(m[5])
		} else if m := idleWork.FindStringSubmatch(line); m != nil {
			size(atoi(m[1])).AgentLostEvents = atoi(m[2])
		} else if m := idleDumps.FindStringSubmatch(line); m != nil {
			size(atoi(m[1])).AgentIdleQPDumps = atoi(m[2])
		} else if m := sizeLine.FindStringSubmatch(line); m != nil {
			size(atoi(m[2])).AnswerBytes[m[1]] = atoi(m[3])
		} else if m := idleLine.FindStringSubmatch(line); m != nil && atoi(m[3]) > 0 && atoi(m[4]) > 0 {
			s := size(atoi(m[1]))
			s.AgentIdleCPU = float64(atoi(m[2])) / float64(atoi(m[3])) / float64(atoi(m[4]))
			s.AgentIdleRSSKiB = atoi(m[5])
		} else if m := churnLine.FindStringSubmatch(line); m != nil && atof(m[3]) > 0 && atoi(m[6]) > 0 {
			s, secs, hz := size(atoi(m[1])), atof(m[3]), float64(atoi(m[6]))
			s.ChurnEventsPerSec = 6 * float64(atoi(m[2])) / secs
			s.AgentChurnCPU = float64(atoi(m[4])) / hz / secs
			s.ReaderChurnCPU = float64(atoi(m[5])) / hz / secs
		} else if probeLine.MatchString(line) {
			k.Probes = append(k.Probes, strings.TrimSpace(line))
		} else if m := agentLine.FindStringSubmatch(line); m != nil {
			s := size(atoi(m[1]))
			s.AgentHWMKiB, s.AgentRSSKiB = atoi(m[2]), atoi(m[3])
		}
	}
	if err := sc.Err(); err != nil {
		return k, err
	}
	if k.Kernel == "" {
		return k, errors.New("no kernel line; did the guest run fail?")
	}
	return k, nil
}

func parseGoBench(b []byte) []GoBench {
	out := []GoBench{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := goBenchLine.FindStringSubmatch(line); m != nil {
			out = append(out, GoBench{Name: m[1], NsPerOp: atof(m[2]), HeapPerQP: atof(m[3]), NsPerQP: atof(m[4]), BytesPerOp: atoi(m[5]), AllocsPerOp: atoi(m[6])})
		}
	}
	return out
}

// median seconds of a label, or NaN when it was not measured.
func median(timings map[string]Timing, label string) float64 {
	t, ok := timings[label]
	if !ok {
		return math.NaN()
	}
	return t.MedianSeconds
}

func (s Size) median(label string) float64 { return median(s.Timings, label) }

func secs(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func mib(kib int) string {
	if kib == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(kib)/1024)
}

func printTables(w io.Writer, rep Report) {
	for _, k := range rep.Kernels {
		fmt.Fprintf(w, "\n### kernel %s (%s), %s, commit %s\n\n", k.Kernel, k.Release, rep.Date, rep.Commit)
		fmt.Fprintln(w, "QP dump, median wall seconds (peak RSS MiB):")
		fmt.Fprintln(w)
		printDump(w, "QPs", k.Sizes)
		fmt.Fprint(w, "Growth exponent t ~ N^e between the two largest sizes (1 linear, 2 quadratic):")
		printGrowth(w, k.Sizes)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "qp-leaks, median wall seconds; answer bytes; agent RSS MiB:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| QPs | netlink (2s watch) | probes (2s watch) | answered by agent | agent, every finding | answer bytes (local, every finding) | answer bytes (agent) | answer bytes (agent, every finding) | agent RSS (peak) | agent at idle: CPU, RSS | agent's lost events |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, s := range k.Sizes {
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %d | %d | %d | %s (%s) | %.1f%%, %s%s | %d |\n", s.QPs,
				secs(s.median("qp-leaks-netlink")), secs(s.median("qp-leaks-probes")), secs(s.median("qp-leaks-agent")),
				secs(s.median("qp-leaks-agent-all")), s.AnswerBytes["qp-leaks-netlink"], s.AnswerBytes["qp-leaks-agent"],
				s.AnswerBytes["qp-leaks-agent-all"], mib(s.AgentRSSKiB), mib(s.AgentHWMKiB), 100*s.AgentIdleCPU, mib(s.AgentIdleRSSKiB),
				idleDumpsNote(s.AgentIdleQPDumps), s.AgentLostEvents)
		}
		if slices.ContainsFunc(k.Sizes, func(s Size) bool { return s.ChurnEventsPerSec > 0 }) {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "Probe events under paced QP churn (10 s at 167 create, INIT, RTR, RTS, ERR, destroy cycles a second), the agent and a JSON reader (`rdmatool trace -j`) following them; CPU as % of one CPU, and per 10,000 events a second (the agent's less its idle CPU):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| QPs held | events/s | agent CPU | JSON reader CPU | agent per 10k events/s | reader per 10k events/s |")
			fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
			for _, s := range k.Sizes {
				if s.ChurnEventsPerSec == 0 {
					continue
				}
				per := 1e4 / s.ChurnEventsPerSec
				fmt.Fprintf(w, "| %d | %.0f | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", s.QPs, s.ChurnEventsPerSec,
					100*s.AgentChurnCPU, 100*s.ReaderChurnCPU, 100*max(0, s.AgentChurnCPU-s.AgentIdleCPU)*per, 100*s.ReaderChurnCPU*per)
			}
		}
		printMRTables(w, k)
		if len(k.Probes) > 0 {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "Probe cost (vmtest/bench/trace-overhead.sh, instruction-counted guest time):")
			fmt.Fprintln(w)
			for _, l := range k.Probes {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
		if d, ok := k.Rename["rdma_rename"]; ok {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "udev rename of one device (rxe0 to its NAME_GUID name), start to exit, median ms over the runs (peak RSS MiB):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| program | runs | median ms (peak RSS) | /rdma_rename |")
			fmt.Fprintln(w, "|---|---:|---:|---:|")
			// rdmatool-udev-rename is what the packaged rule runs;
			// rdmatool is `rdmatool rename udev`.
			for _, prog := range []string{"rdmatool-udev-rename", "rdmatool", "rdma_rename"} {
				if r, ok := k.Rename[prog]; ok {
					fmt.Fprintf(w, "| %s | %d | %.1f (%s) | %s |\n", prog, r.Runs, 1000*r.MedianSeconds, mib(r.MaxRSSKiB), ratio(r.MedianSeconds, d.MedianSeconds))
				}
			}
		}
	}
	if len(rep.GoBenchmarks) > 0 {
		fmt.Fprintln(w, "\nGo benchmarks (host):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| benchmark | ns/op | ns/QP | heap B/QP kept | B/op | allocs/op |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
		for _, b := range rep.GoBenchmarks {
			perQP := "–"
			if b.NsPerQP > 0 {
				perQP = fmt.Sprintf("%.0f", b.NsPerQP)
			}
			heap := "–"
			if b.HeapPerQP > 0 {
				heap = fmt.Sprintf("%.0f", b.HeapPerQP)
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %d | %d |\n", b.Name, b.NsPerOp, perQP, heap, b.BytesPerOp, b.AllocsPerOp)
		}
	}
}

// printMRTables prints the MR listings of k and the agent with the MRs
// tracked, when the log has them.
func printMRTables(w io.Writer, k KernelRun) {
	if len(k.MRSizes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "MR dump (MRs of a page each on one PD, beside %s QPs), median wall seconds (peak RSS MiB):\n", count(k.MRSizes[0].QPs))
		fmt.Fprintln(w)
		printDump(w, "MRs", k.MRSizes)
		fmt.Fprint(w, "Growth exponent t ~ N^e between the two largest MR sizes:")
		printGrowth(w, k.MRSizes)
	}
	a := k.AgentMRs
	if a == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Agent at idle with %s QPs and %s MRs tracked: CPU (%% of one CPU) and RSS (MiB) over %d s, the MR and QP dumps it made then (at most one of each per reconcile, every %d s), the same QPs without MRs, and its catching up on the MRs registered while it was stopped (wall s, CPU s, MR and QP dumps):\n",
		count(a.QPs), count(a.MRs), a.IdleSeconds, a.ReconcileSeconds)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| QPs | MRs | at idle: CPU, RSS | MR dumps at idle | QP dumps at idle | no MRs: CPU, RSS | catching up: s, CPU s (MR, QP dumps) | RSS (peak) after catching up |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	without := "–"
	if i := slices.IndexFunc(k.Sizes, func(s Size) bool { return s.QPs == a.QPs }); i >= 0 && k.Sizes[i].AgentIdleRSSKiB > 0 {
		without = fmt.Sprintf("%.1f%%, %s", 100*k.Sizes[i].AgentIdleCPU, mib(k.Sizes[i].AgentIdleRSSKiB))
	}
	fmt.Fprintf(w, "| %d | %d | %.1f%%, %s | %d | %d | %s | %d, %.2f (%d, %d) | %s (%s) |\n", a.QPs, a.MRs,
		100*a.IdleCPU, mib(a.IdleRSSKiB), a.IdleMRDumps, a.IdleScans, without,
		a.CatchUpSeconds, a.CatchUpCPUSeconds, a.CatchUpMRDumps, a.CatchUpScans, mib(a.RSSKiB), mib(a.HWMKiB))
}

// count writes n as the tables' captions do: 60k for 60,000.
func count(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// point is one size of a dump table: its number of objects, its
// timings and the floor's replies.
type point interface {
	objects() int
	timing(label string) Timing
	median(label string) float64
	floorReplies() int
}

func (s Size) objects() int               { return s.QPs }
func (s Size) timing(label string) Timing { return s.Timings[label] }
func (s Size) floorReplies() int          { return s.FloorDatagrams }

func (s MRSize) objects() int                { return s.MRs }
func (s MRSize) timing(label string) Timing  { return s.Timings[label] }
func (s MRSize) median(label string) float64 { return median(s.Timings, label) }
func (s MRSize) floorReplies() int           { return s.FloorDatagrams }

// printDump prints a dump table: one row of what (QPs, MRs) per size,
// then an empty line.
func printDump[P point](w io.Writer, what string, sizes []P) {
	fmt.Fprintf(w, "| %s | floor | rdmatool -j | rdmatool text | iproute2 -j | rdmatool/floor | rdmatool/iproute2 | floor replies |\n", what)
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range sizes {
		cell := func(label string) string {
			return fmt.Sprintf("%s (%s)", secs(s.median(label)), mib(s.timing(label).MaxRSSKiB))
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %d |\n", s.objects(),
			cell("floor"), cell("rdmatool"), cell("rdmatool-text"), cell("iproute2"),
			ratio(s.median("rdmatool"), s.median("floor")), ratio(s.median("rdmatool"), s.median("iproute2")), s.floorReplies())
	}
	fmt.Fprintln(w)
}

// printGrowth ends a growth line: the exponent of the floor, rdmatool and
// iproute2.
func printGrowth[P point](w io.Writer, sizes []P) {
	for _, label := range []string{"floor", "rdmatool", "iproute2"} {
		fmt.Fprintf(w, " %s %s", label, growth(sizes, label))
	}
	fmt.Fprintln(w)
}

// growth is the exponent e in t ~ N^e between the two largest sizes
// measured for label.
func growth[P point](sizes []P, label string) string {
	var pts []P
	for _, s := range sizes {
		if !math.IsNaN(s.median(label)) {
			pts = append(pts, s)
		}
	}
	if len(pts) < 2 {
		return "–"
	}
	a, b := pts[len(pts)-2], pts[len(pts)-1]
	return fmt.Sprintf("%.2f", math.Log(b.median(label)/a.median(label))/math.Log(float64(b.objects())/float64(a.objects())))
}

// plot draws one panel per kernel: median QP dump time against QPs for
// rdmatool, iproute2 and the floor.
func plot(rep Report, out string) error {
	var script bytes.Buffer
	fmt.Fprintf(&script, "set terminal pngcairo size %d,440 font ',10'\n", max(960, 80+420*len(rep.Kernels)))
	fmt.Fprintf(&script, "set output %q\n", out)
	fmt.Fprintf(&script, "set multiplot layout 1,%d title %q\n", len(rep.Kernels),
		fmt.Sprintf("QP dump on rxe0: median wall time, lab guest under TCG (%s, commit %s)", rep.Date, rep.Commit))
	script.WriteString("set key top left\nset grid\nset xlabel 'QPs held (thousands)'\nset ylabel 'seconds'\n")
	for _, k := range rep.Kernels {
		fmt.Fprintf(&script, "set title %q\n", "kernel "+k.Kernel+" ("+k.Release+")")
		var data strings.Builder
		for _, label := range []string{"rdmatool", "iproute2", "floor"} {
			for _, s := range k.Sizes {
				if v := s.median(label); !math.IsNaN(v) {
					fmt.Fprintf(&data, "%g %g\n", float64(s.QPs)/1000, v)
				}
			}
			data.WriteString("e\n")
		}
		script.WriteString("plot '-' using 1:2 with linespoints lw 2 title 'rdmatool res qp -j', " +
			"'-' using 1:2 with linespoints lw 2 title 'rdma -j res show qp (iproute2)', " +
			"'-' using 1:2 with linespoints lw 2 title 'floor (nlfloor: 32 KiB reads, discarded)'\n")
		script.WriteString(data.String())
	}
	script.WriteString("unset multiplot\n")
	cmd := exec.Command("gnuplot")
	cmd.Stdin = &script
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("gnuplot: %w", err)
	}
	return nil
}

// idleDumpsNote says in the idle cell how many QP dumps the window held
// when there were any: one --reconcile's dump of 60,000 QPs is most of a
// TCG window's CPU.
func idleDumpsNote(n int) string {
	switch {
	case n == 1:
		return " (1 QP dump)"
	case n > 1:
		return fmt.Sprintf(" (%d QP dumps)", n)
	}
	return ""
}
