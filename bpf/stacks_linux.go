//go:build linux && (amd64 || arm64)

package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
)

// stackMap is what stackGens uses of a BPF map: *ebpf.Map is one.
type stackMap interface {
	Lookup(key, valueOut any) error
	NextKey(key, nextKeyOut any) error
	Delete(key any) error
	Put(key, value any) error
}

// stackGens keeps the two generations of stack maps (stacks0, stacks1 in
// qp.c) bounded in time and reads stacks from them. The programs store into
// the map whose generation is the low bit of stack_gen's count (flips);
// every period, once the current map holds a stack, flip empties the other
// map, drops what was read from it, and makes it the current one. A
// generation is emptied one period after it stopped being current: what
// it still holds was stored before that, and the records of those stacks
// have been read since, unless a library call outlived the period (the
// programs then leave its user stack out of the record: fill_user_site) or
// the record waited in the ring as long (stack drops it: it is older than
// the emptying). A period of 30 s is far longer than any QP-creating
// library call runs (rdma_create_ep resolves an address and a route
// first, within its own timeouts of a few seconds) and than the ring
// holds a record while the reader keeps up. So the maps hold only what the
// last two periods stored, and the reader's cache (byID) no more than the
// maps. Only the goroutine that reads events (Events) calls its methods
// but held.
type stackGens struct {
	log    *slog.Logger
	maps   [2]stackMap
	gen    stackMap // stack_gen: the count of flips at key 0
	period time.Duration
	// monotonic is the probes' clock (CLOCK_MONOTONIC ns), which records
	// are stamped with.
	monotonic func() uint64

	flips   uint32    // stack_gen's count: flips&1 is the current generation
	flipped time.Time // when the current generation was last looked at for a flip
	// byID are the stacks read from each generation's map, by id;
	// emptiedAt when each map was last emptied (monotonic ns, 0: never).
	byID      [2]map[int32][]uint64
	emptiedAt [2]uint64
	// prevHeld is what the previous generation's map held when it
	// stopped being the current one; held is it plus the stacks read from
	// the current map since (StackStats, from any goroutine).
	prevHeld int
	held     atomic.Int64
	// flipped counts the flips for StackStats (any goroutine).
	flipCount atomic.Uint32
	buf       [stackDepth]uint64
}

func newStackGens(log *slog.Logger, maps [2]stackMap, gen stackMap, period time.Duration, monotonic func() uint64, now time.Time) *stackGens {
	return &stackGens{log: log, maps: maps, gen: gen, period: period, monotonic: monotonic, flipped: now,
		byID: [2]map[int32][]uint64{{}, {}}}
}

// current is the generation the programs store into now.
func (g *stackGens) current() int { return int(g.flips & 1) }

// stack returns a copy of the stack stored under id in generation gen's
// map by a record stamped ts (monotonic ns), or nil: when it is not there,
// or the record was written before the map was last emptied (its stack
// was deleted, and the id may name another one now).
func (g *stackGens) stack(gen int, id int32, ts uint64) []uint64 {
	gen &= 1
	if ts < g.emptiedAt[gen] {
		return nil
	}
	st, ok := g.byID[gen][id]
	if !ok {
		if err := g.maps[gen].Lookup(uint32(id), &g.buf); err != nil {
			g.log.Debug("stack not read", "stack_id", id, "generation", gen, "err", err)
			return nil
		}
		n := 0
		for n < len(g.buf) && g.buf[n] != 0 {
			n++
		}
		st = slices.Clone(g.buf[:n])
		g.byID[gen][id] = st
		if gen == g.current() {
			g.held.Add(1)
		}
	}
	return slices.Clone(st)
}

// maybeFlip flips the generation when a period has passed since the last
// look and the current map holds a stack; with it empty, it looks again a
// period later.
func (g *stackGens) maybeFlip(now time.Time) {
	if now.Sub(g.flipped) < g.period {
		return
	}
	g.flipped = now
	var key uint32
	if err := g.maps[g.current()].NextKey(nil, &key); err != nil {
		return // empty
	}
	if err := g.flip(); err != nil {
		g.log.Debug("stack generation not flipped", "err", err)
	}
}

// flip empties the other generation's map and makes it the current one.
// The previous generation's map is counted then (prevHeld).
func (g *stackGens) flip() error {
	cur, next := g.current(), 1-g.current()
	deleted, err := g.empty(next)
	g.byID[next] = map[int32][]uint64{}
	if err != nil {
		return err
	}
	if err := g.gen.Put(uint32(0), g.flips+1); err != nil {
		return fmt.Errorf("bpf: flip stack generation: %w", err)
	}
	g.flips++
	g.flipCount.Store(g.flips)
	// Records written from here on see the new count: a stack of the
	// emptied map that one of them names was stored after it.
	g.emptiedAt[next] = g.monotonic()
	held, err := g.count(cur)
	if err != nil {
		g.log.Debug("stacks not counted", "generation", cur, "err", err)
		held = len(g.byID[cur])
	}
	g.prevHeld = held
	g.held.Store(int64(held))
	g.log.Debug("stack generation flipped", "generation", next, "flips", g.flips, "deleted", deleted, "held", held)
	return nil
}

// keys lists the ids gen's map holds, at most capacity of them.
func (g *stackGens) keys(gen int, capacity int) ([]uint32, error) {
	var ids []uint32
	var key uint32
	var prev any // nil: from the first
	for len(ids) < capacity {
		err := g.maps[gen].NextKey(prev, &key)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return ids, fmt.Errorf("bpf: list stacks of generation %d: %w", gen, err)
		}
		ids = append(ids, key)
		prev = key
	}
	return ids, nil
}

// count counts the stacks gen's map holds.
func (g *stackGens) count(gen int) (int, error) {
	ids, err := g.keys(gen, stackMapCapacity)
	return len(ids), err
}

// empty deletes every stack of gen's map and says how many it deleted.
func (g *stackGens) empty(gen int) (int, error) {
	ids, err := g.keys(gen, stackMapCapacity)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if err := g.maps[gen].Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, fmt.Errorf("bpf: delete stack %d of generation %d: %w", id, gen, err)
		}
		n++
	}
	return n, nil
}
