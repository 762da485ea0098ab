//go:build linux && (amd64 || arm64)

package bpf

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
)

// fakeStackMap is a stack map (or stack_gen, through Put) in memory.
type fakeStackMap struct {
	stacks  map[uint32][]uint64
	value   uint32 // the last Put
	lookups int
}

func newFakeStackMap(stacks map[uint32][]uint64) *fakeStackMap {
	if stacks == nil {
		stacks = map[uint32][]uint64{}
	}
	return &fakeStackMap{stacks: stacks}
}

func (m *fakeStackMap) Lookup(key, valueOut any) error {
	st, ok := m.stacks[key.(uint32)]
	if !ok {
		return ebpf.ErrKeyNotExist
	}
	m.lookups++
	buf := valueOut.(*[stackDepth]uint64)
	*buf = [stackDepth]uint64{}
	copy(buf[:], st)
	return nil
}

func (m *fakeStackMap) NextKey(key, nextKeyOut any) error {
	ids := slices.Sorted(func(yield func(uint32) bool) {
		for id := range m.stacks {
			if !yield(id) {
				return
			}
		}
	})
	for _, id := range ids {
		if key == nil || id > key.(uint32) {
			*nextKeyOut.(*uint32) = id
			return nil
		}
	}
	return ebpf.ErrKeyNotExist
}

func (m *fakeStackMap) Delete(key any) error {
	if _, ok := m.stacks[key.(uint32)]; !ok {
		return ebpf.ErrKeyNotExist
	}
	delete(m.stacks, key.(uint32))
	return nil
}

func (m *fakeStackMap) Put(key, value any) error {
	m.value = value.(uint32)
	return nil
}

// TestStackGenerations follows the reader's bookkeeping of the two stack
// maps through two flips: a flip waits a whole period and a current map
// that holds stacks, empties the map it flips to and forgets what was read
// from it, keeps the previous generation readable, counts what it holds,
// and a record written before its map was emptied gets no stack, not the
// one its id names now.
func TestStackGenerations(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var clock uint64 = 1000 // the probes' clock, ns
	m0 := newFakeStackMap(map[uint32][]uint64{5: {0xa, 0xb}, 7: {0xe}})
	m1 := newFakeStackMap(nil)
	gen := newFakeStackMap(nil)
	g := newStackGens(slog.New(slog.DiscardHandler), [2]stackMap{m0, m1}, gen, 30*time.Second,
		func() uint64 { return clock }, t0)
	check := func(what string, gotGen, wantGen int, got []uint64, want []uint64, wantHeld int64) {
		t.Helper()
		if gotGen != wantGen {
			t.Errorf("%s: current generation %d, want %d", what, gotGen, wantGen)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: stack (-want +got):\n%s", what, diff)
		}
		if h := g.held.Load(); h != wantHeld {
			t.Errorf("%s: held %d, want %d", what, h, wantHeld)
		}
	}

	check("read from generation 0", g.current(), 0, g.stack(0, 5, 900), []uint64{0xa, 0xb}, 1)
	g.stack(0, 5, 900)
	if m0.lookups != 1 {
		t.Errorf("stack 5 looked up %d times, want once (then cached)", m0.lookups)
	}
	g.maybeFlip(t0.Add(29 * time.Second))
	check("29s: no flip", g.current(), 0, g.stack(0, 5, 900), []uint64{0xa, 0xb}, 1)

	// 30s: flip to 1, which was empty. Generation 0 is the previous one:
	// counted whole (2 stacks, 1 of them read), and still read.
	clock = 2000
	g.maybeFlip(t0.Add(30 * time.Second))
	if gen.value != 1 {
		t.Errorf("stack_gen = %d after the first flip, want 1", gen.value)
	}
	check("30s: flipped", g.current(), 1, g.stack(0, 7, 1500), []uint64{0xe}, 2)
	m1.stacks[5] = []uint64{0xc} // stored by the programs now
	check("30s: generation 1's stack 5", g.current(), 1, g.stack(1, 5, 2500), []uint64{0xc}, 3)
	check("30s: generation 0's stack 5", g.current(), 1, g.stack(0, 5, 1500), []uint64{0xa, 0xb}, 3)

	g.maybeFlip(t0.Add(59 * time.Second))
	check("59s: no flip", g.current(), 1, nil, nil, 3)

	// 60s: flip back to 0, emptied first; what was read from it is
	// forgotten. Generation 1 is the previous one: 1 stack.
	clock = 3000
	g.maybeFlip(t0.Add(60 * time.Second))
	if gen.value != 2 {
		t.Errorf("stack_gen = %d after the second flip, want 2", gen.value)
	}
	if len(m0.stacks) != 0 {
		t.Errorf("generation 0's map holds %v after the flip to it, want nothing", m0.stacks)
	}
	check("60s: flipped", g.current(), 0, g.stack(1, 5, 2500), []uint64{0xc}, 1)
	m0.stacks[5] = []uint64{0xd} // another stack under the same id
	check("60s: a record from before the emptying", g.current(), 0, g.stack(0, 5, 2999), nil, 1)
	check("60s: a record from after it", g.current(), 0, g.stack(0, 5, 3001), []uint64{0xd}, 2)

	// 90s: generation 0 holds a stack, 1 is emptied. 120s: 1 holds
	// nothing, so no flip: a period later, still nothing.
	g.maybeFlip(t0.Add(90 * time.Second))
	check("90s: flipped", g.current(), 1, nil, nil, 1)
	g.maybeFlip(t0.Add(120 * time.Second))
	g.maybeFlip(t0.Add(150 * time.Second))
	check("150s: the current map is empty, no flip", g.current(), 1, nil, nil, 1)
	if gen.value != 3 {
		t.Errorf("stack_gen = %d, want 3", gen.value)
	}
}

// TestStackPeriodOption: 0 is the production period, a negative one an
// error.
func TestStackPeriodOption(t *testing.T) {
	t.Parallel()
	tests := []struct {
		period  time.Duration
		want    time.Duration
		wantErr error
	}{
		{0, 30 * time.Second, nil},
		{2 * time.Second, 2 * time.Second, nil},
		{-time.Second, 0, errStackPeriod},
	}
	for _, tt := range tests {
		got, err := Options{StackPeriod: tt.period}.stackPeriod()
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("stackPeriod(%v) = %v, %v; want %v, %v", tt.period, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestStackEntries(t *testing.T) {
	for _, tt := range []struct {
		entries int
		want    uint32
		wantErr error
	}{
		{0, 1024, nil},
		{128, 128, nil},
		{1024, 1024, nil},
		{1025, 0, errStackEntries},
		{-1, 0, errStackEntries},
	} {
		got, err := Options{StackEntries: tt.entries}.stackEntries()
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("stackEntries(%d) = %d, %v; want %d, %v", tt.entries, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestStackGenerationsUprobes runs the uprobe entry on this host's
// libibverbs (as TestSitesUprobes) with the reader's bookkeeping on the
// real maps: a call stores its user stack in the map of the generation
// stack_gen names and says which; a flip makes the other map the current
// one, and the next flip to a map empties it first.
func TestStackGenerationsUprobes(t *testing.T) {
	hostLibrary(t, "libibverbs.so.1")
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("needs libibverbs-dev")
	}
	bin := filepath.Join(t.TempDir(), "fakeverbs")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, "testdata/fakeverbs.c", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	s, maps := openTestSites(t)
	s.attachHost()
	t0 := time.Now()
	g := newStackGens(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		[2]stackMap{maps["stacks0"], maps["stacks1"]}, maps["stack_gen"], time.Minute, monotonicNow, t0)
	stored := func(t *testing.T, key uint64, wantFlips uint32) int32 {
		t.Helper()
		var c qpUserCall
		if err := maps["user_calls"].Lookup(key, &c); err != nil {
			t.Fatalf("no call recorded for %#x: %v", key, err)
		}
		if c.Ustack < 0 || c.UstackFlips != wantFlips {
			t.Fatalf("user stack %d stored at flip %d; want a stack at flip %d", c.Ustack, c.UstackFlips, wantFlips)
		}
		var st [stackDepth]uint64
		if err := maps[[]string{"stacks0", "stacks1"}[wantFlips&1]].Lookup(uint32(c.Ustack), &st); err != nil || st[0] == 0 {
			t.Errorf("stack %d of generation %d: %x, %v; want it there", c.Ustack, wantFlips&1, st[:2], err)
		}
		return c.Ustack
	}
	holds := func(name string) int {
		n := 0
		var key uint32
		var prev any
		for maps[name].NextKey(prev, &key) == nil {
			n++
			prev = key
		}
		return n
	}

	f := startFakeVerbs(t, bin)
	_, key := f.call()
	stored(t, key, 0)
	f.resume()
	if n0, n1 := holds("stacks0"), holds("stacks1"); n0 != 1 || n1 != 0 {
		t.Errorf("stacks0 holds %d, stacks1 %d; want 1 and 0", n0, n1)
	}
	g.maybeFlip(t0.Add(time.Minute))
	if g.current() != 1 || g.held.Load() != 1 {
		t.Errorf("after a period: generation %d holding %d, want 1 holding 1 (stacks0's)", g.current(), g.held.Load())
	}

	f.proceed()
	_, key = f.call() // the stub calls ibv_create_qp inside: one stack, of the outer call
	stored(t, key, 1)
	f.resume()
	g.maybeFlip(t0.Add(2 * time.Minute))
	if n0, n1 := holds("stacks0"), holds("stacks1"); g.current() != 0 || n0 != 0 || n1 != 1 {
		t.Errorf("after two periods: generation %d, stacks0 holds %d, stacks1 %d; want 0, emptied, 1", g.current(), n0, n1)
	}
	var flips uint32
	if err := maps["stack_gen"].Lookup(uint32(0), &flips); err != nil || flips != 2 {
		t.Errorf("stack_gen = %d, %v; want 2", flips, err)
	}
	var refused []uint64
	if err := maps["counters"].Lookup(uint32(counterStacksRefused), &refused); err != nil || slices.Max(refused) != 0 {
		t.Errorf("stacks refused %v, %v; want none", refused, err)
	}
}
