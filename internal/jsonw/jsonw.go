package jsonw

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// safe reports whether encoding/json writes an ASCII byte as itself inside
// a string: every printable character and DEL, except ", \, <, > and &.
var safe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string, quoted and escaped as
// encoding/json writes it (see the package comment).
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is still to be copied
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control characters, <, > and &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendUint appends v in decimal.
func AppendUint[T ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64](b []byte, v T) []byte {
	return strconv.AppendUint(b, uint64(v), 10)
}

// AppendInt appends v in decimal.
func AppendInt[T ~int | ~int8 | ~int16 | ~int32 | ~int64](b []byte, v T) []byte {
	return strconv.AppendInt(b, int64(v), 10)
}

// AppendBool appends true or false.
func AppendBool(b []byte, v bool) []byte {
	return strconv.AppendBool(b, v)
}

// AppendFloat appends f as encoding/json writes a float64: the shortest
// decimal that reads back as f, with an exponent (1e-7, 1e+21) only when
// |f| is below 1e-6 or at least 1e21. JSON has no NaN or infinity, and
// encoding/json refuses them with an error; AppendFloat writes null.
func AppendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // a one-digit negative exponent without its zero: 1e-7, not 1e-07
		b = b[:n-1]
	}
	return b
}
