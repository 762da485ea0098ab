package symbolize

import (
	"debug/elf"
	"encoding/binary"
)

// maxCallLen is the longest call instruction callLen recognises: x86's
// notrack prefix, a REX prefix, ff, ModRM, SIB and a 32-bit displacement.
const maxCallLen = 9

// callLen returns the length of the call instruction that ends at the
// return address ret (a link-time address of e), whose preceding bytes are
// code (at most maxCallLen of them, ending at ret); 0 when no call
// instruction is recognised there.
//
// On arm64 every instruction is 4 bytes. On x86 the bytes are read
// backwards, which has no single answer in general, so the forms are tried
// from the likeliest: a direct call (e8 rel32) whose target is code of the
// file, then an indirect call (ff /2) of each length from the shortest, a
// RIP-relative one only if the slot it reads is in the file's segments,
// with the REX and notrack (3e) prefixes before it.
func callLen(e *elfFile, code []byte, ret uint64) int {
	switch e.machine {
	case elf.EM_AARCH64:
		return 4
	case elf.EM_X86_64:
		return x86CallLen(e, code, ret, true)
	case elf.EM_386:
		return x86CallLen(e, code, ret, false)
	}
	return 0
}

func x86CallLen(e *elfFile, b []byte, ret uint64, rex bool) int {
	n := len(b)
	if n >= 5 && b[n-5] == 0xe8 {
		rel := int64(int32(binary.LittleEndian.Uint32(b[n-4:])))
		if e.mapped(ret+uint64(rel), true) {
			return 5
		}
	}
	for p := n - 2; p >= 0 && p >= n-7; p-- {
		if b[p] != 0xff {
			continue
		}
		l, ripRel, ok := x86IndirectLen(b[p+1:])
		if !ok || l != n-p {
			continue
		}
		if ripRel {
			disp := binary.LittleEndian.Uint32(b[n-4:])
			slot := uint64(disp) // i386: an absolute address
			if rex {
				slot = ret + uint64(int64(int32(disp)))
			}
			if !e.mapped(slot, false) {
				continue
			}
		}
		if rex && p > 0 && b[p-1]&0xf0 == 0x40 {
			p--
		}
		if p > 0 && b[p-1] == 0x3e {
			p--
		}
		return n - p
	}
	return 0
}

// x86IndirectLen decodes what follows the ff opcode of a call: the ModRM
// byte (reg field 2 is call; 3 is a far call, which compilers do not emit)
// and the SIB and displacement it asks for. l counts ff itself.
// ripRel is set for [rip+disp32] (mod 00, r/m 101; [disp32] on i386).
func x86IndirectLen(b []byte) (l int, ripRel, ok bool) {
	if len(b) == 0 {
		return 0, false, false
	}
	modrm := b[0]
	mod, reg, rm := modrm>>6, modrm>>3&7, modrm&7
	if reg != 2 {
		return 0, false, false
	}
	l = 2 // ff, ModRM
	if mod != 3 && rm == 4 {
		if len(b) < 2 {
			return 0, false, false
		}
		l++ // SIB
		if mod == 0 && b[1]&7 == 5 {
			l += 4 // no base: disp32
		}
	}
	switch {
	case mod == 0 && rm == 5:
		l += 4
		ripRel = true
	case mod == 1:
		l++
	case mod == 2:
		l += 4
	}
	return l, ripRel, true
}
