package rename

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseMap checks that the map parser never panics, that what it
// accepts is a valid map, and that writing the map out again reads back the
// same.
func FuzzParseMap(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.conf")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("0002:c903:00a1:b2c3 a#b # c\r\n")
	f.Add("0x0002c90300a1b2c3\tname\n\n#\n")
	f.Fuzz(func(t *testing.T, content string) {
		m, err := ParseMap(strings.NewReader(content), "f.conf")
		if err != nil {
			var me *MapError
			if errors.As(err, &me) {
				for _, l := range me.Lines {
					if l.Line < 1 || l.Err == nil {
						t.Fatalf("bad line error %+v", l)
					}
				}
				if !strings.HasPrefix(err.Error(), "rename: f.conf:") {
					t.Fatalf("error does not name the file and line: %v", err)
				}
			}
			return
		}
		guids, names := map[uint64]bool{}, map[string]bool{}
		var out strings.Builder
		for _, e := range m.Entries {
			if e.GUID == 0 || guids[uint64(e.GUID)] || names[e.Name] {
				t.Fatalf("accepted a zero or repeated entry: %+v", e)
			}
			guids[uint64(e.GUID)], names[e.Name] = true, true
			if err := ValidateName(e.Name); err != nil {
				t.Fatalf("accepted an invalid name: %v", err)
			}
			fmt.Fprintf(&out, "%s %s\n", e.GUID, e.Name)
		}
		again, err := ParseMap(strings.NewReader(out.String()), "f.conf")
		if err != nil {
			t.Fatalf("re-reading %q: %v", out.String(), err)
		}
		if len(again.Entries) != len(m.Entries) {
			t.Fatalf("re-read %d entries, want %d", len(again.Entries), len(m.Entries))
		}
		for i, e := range again.Entries {
			if e.GUID != m.Entries[i].GUID || e.Name != m.Entries[i].Name {
				t.Fatalf("entry %d re-read as %+v, want %+v", i, e, m.Entries[i])
			}
		}
	})
}

// FuzzValidateName checks ValidateName against the kernel's rules.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"", "fab0-hca0", "rocex525400fffec0ffee", ".", "..", "a/b", "ib%d", "a b", "a\x00",
		"näme", "\xff", strings.Repeat("x", 63), strings.Repeat("x", 64), "lab#1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		if err == nil {
			if name == "" || len(name) > maxNameLen || name == "." || name == ".." ||
				strings.ContainsAny(name, "/% \t\n\r\x00") || !utf8.ValidString(name) {
				t.Fatalf("ValidateName(%q) accepted a name the kernel refuses or mangles", name)
			}
			if f := strings.Fields(name); len(f) != 1 || f[0] != name {
				t.Fatalf("ValidateName(%q) accepted a name that does not fit a map file line", name)
			}
			return
		}
		if !errors.Is(err, ErrInvalidName) || !strings.HasPrefix(err.Error(), "invalid name ") {
			t.Fatalf("ValidateName(%q) = %v", name, err)
		}
	})
}
