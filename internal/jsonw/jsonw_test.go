package jsonw

import (
	"encoding/json"
	"math"
	"testing"
)

// marshal is encoding/json's rendering of v, which jsonw must match.
func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAppendString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    string
		want string
	}{
		{"empty", "", `""`},
		{"plain ASCII", "kworker/0:1 ib_core", `"kworker/0:1 ib_core"`},
		{"quote and backslash", `a"b\c`, `"a\"b\\c"`},
		{"named control characters", "\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"other control characters", "\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"DEL as is", "\x7f", "\"\x7f\""},
		{"HTML characters", "<a>&", `"\u003ca\u003e\u0026"`},
		{"UTF-8 as is", "é€😀", `"é€😀"`},
		{"line and paragraph separators", "a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"invalid UTF-8, byte by byte", "a\xffb\xe2\x82c\xed\xa0\x80", `"a\ufffdb\ufffd\ufffdc\ufffd\ufffd\ufffd"`},
		{"a truncated rune at the end", "ok\xe2\x82", `"ok\ufffd\ufffd"`},
		{"U+FFFD itself", "\ufffd", "\"\ufffd\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendString([]byte("x"), tt.s)); got != "x"+tt.want {
				t.Errorf("AppendString(%q) = %s, want x%s", tt.s, got, tt.want)
			}
			if got := marshal(t, tt.s); got != tt.want {
				t.Errorf("encoding/json writes %q as %s, the test wants %s", tt.s, got, tt.want)
			}
		})
	}
}

func TestAppendIntegers(t *testing.T) {
	t.Parallel()
	type kind uint8
	tests := []struct {
		got  []byte
		want any
	}{
		{AppendUint(nil, uint8(255)), uint8(255)},
		{AppendUint(nil, kind(9)), kind(9)},
		{AppendUint(nil, uint32(math.MaxUint32)), uint32(math.MaxUint32)},
		{AppendUint(nil, uint64(math.MaxUint64)), uint64(math.MaxUint64)},
		{AppendUint(nil, uint(0)), uint(0)},
		{AppendInt(nil, int8(-128)), int8(-128)},
		{AppendInt(nil, int32(math.MinInt32)), int32(math.MinInt32)},
		{AppendInt(nil, int64(math.MinInt64)), int64(math.MinInt64)},
		{AppendInt(nil, int64(math.MaxInt64)), int64(math.MaxInt64)},
		{AppendInt(nil, 0), 0},
		{AppendBool(nil, true), true},
		{AppendBool(nil, false), false},
	}
	for _, tt := range tests {
		if want := marshal(t, tt.want); string(tt.got) != want {
			t.Errorf("%T %v: got %s, want %s", tt.want, tt.want, tt.got, want)
		}
	}
}

func TestAppendFloat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f    float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "-0"},
		{60.0015, "60.0015"},
		{1e-6, "0.000001"},
		{9.99e-7, "9.99e-7"},
		{1e-7, "1e-7"},
		{-1.5e-10, "-1.5e-10"},
		{5e-324, "5e-324"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
		{-9.223372036854776e18, "-9223372036854776000"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{0.30000000000000004, "0.30000000000000004"},
	}
	for _, tt := range tests {
		if got := string(AppendFloat(nil, tt.f)); got != tt.want {
			t.Errorf("AppendFloat(%v) = %s, want %s", tt.f, got, tt.want)
		}
		if got := marshal(t, tt.f); got != tt.want {
			t.Errorf("encoding/json writes %v as %s, the test wants %s", tt.f, got, tt.want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := string(AppendFloat([]byte("x"), f)); got != "xnull" {
			t.Errorf("AppendFloat(%v) = %s, want xnull", f, got)
		}
		if _, err := json.Marshal(f); err == nil {
			t.Errorf("encoding/json writes %v, the package comment says it refuses it", f)
		}
	}
}

// TestAppendAllocs: nothing allocates into a slice with room, whatever a
// string needs escaped.
func TestAppendAllocs(t *testing.T) {
	b := make([]byte, 0, 1024)
	n := testing.AllocsPerRun(100, func() {
		b = AppendString(b[:0], "bad\xffutf8 <&> \u2028 \t é")
		b = AppendFloat(b, 1.5e-9)
		b = AppendFloat(b, 60.0015)
		b = AppendUint(b, uint64(math.MaxUint64))
		b = AppendInt(b, int32(-17))
		b = AppendBool(b, true)
	})
	if n != 0 {
		t.Errorf("%v allocations per run, want 0", n)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "rxe0", `odd "name"\<&>`, "tab\there\n", "bad\xffutf8", "\x00\x1f\x7f", "é\u2028\u2029\ufffd",
		"\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(AppendString(nil, s)), marshal(t, s); got != want {
			t.Fatalf("AppendString(%q):\n got %s\nwant %s", s, got, want)
		}
	})
}

func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, math.Copysign(0, -1), 60.0015, 1e-6, 9.99e-7, 1e-7, 5e-324, 1e20, 1e21, math.MaxFloat64, -1.5e-10,
		math.NaN(), math.Inf(-1)} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		got := string(AppendFloat(nil, v))
		want, err := json.Marshal(v)
		if err != nil {
			want = []byte("null") // NaN and infinities: the package comment's promise
		}
		if got != string(want) {
			t.Fatalf("AppendFloat(%v, bits %#x):\n got %s\nwant %s", v, bits, got, want)
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	for _, bc := range []struct{ name, s string }{
		{"plain", "kworker/0:1"},
		{"escaped", `odd "name"<&>` + "\u2028 é\xff"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendString(buf[:0], bc.s)
			}
		})
	}
}
