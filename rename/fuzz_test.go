package rename

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
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
	f.Add("\ufeff0002:c903:00a1:b2c3 a\n\ufeff")
	f.Add("0002:c903:00a1:b2c3 a\u202eb\n")
	f.Fuzz(func(t *testing.T, content string) {
		m, err := parseMap([]byte(content), "f.conf")
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
		again, err := parseMap([]byte(out.String()), "f.conf")
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
		"näme", "\xff", strings.Repeat("x", 63), strings.Repeat("x", 64), "lab#1", "-labdash", "a\u202eb", "\u200b", "\ufeffa"} {
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
			for _, r := range name {
				if unicode.Is(unicode.Cf, r) {
					t.Fatalf("ValidateName(%q) accepted the invisible format character %U", name, r)
				}
			}
			return
		}
		if !errors.Is(err, ErrInvalidName) || !strings.HasPrefix(err.Error(), "invalid name ") {
			t.Fatalf("ValidateName(%q) = %v", name, err)
		}
	})
}

// seedLines returns the lines of a testdata file that are not comments.
func seedLines(f *testing.F, path string) []string {
	f.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// FuzzParsePolicies checks the --policy list parser: it never panics, what
// it accepts is a list of known policies without repeats, one per
// comma-separated field, and the list written out again parses the same.
func FuzzParsePolicies(f *testing.F) {
	for _, l := range seedLines(f, "testdata/policies.txt") {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParsePolicies(s)
		if err != nil {
			if got != nil || !strings.HasPrefix(err.Error(), "rename: ") {
				t.Fatalf("ParsePolicies(%q) = %v, %v", s, got, err)
			}
			return
		}
		fields := strings.Split(s, ",")
		if len(got) != len(fields) {
			t.Fatalf("ParsePolicies(%q) = %v: %d policies from %d fields", s, got, len(got), len(fields))
		}
		seen := map[Policy]bool{}
		var names []string
		for i, p := range got {
			switch p {
			case PolicyMap, PolicyGUID, PolicyPCI, PolicyKeep:
			default:
				t.Fatalf("ParsePolicies(%q) accepted unknown policy %q", s, p)
			}
			if seen[p] {
				t.Fatalf("ParsePolicies(%q) accepted %s twice", s, p)
			}
			if strings.TrimSpace(fields[i]) != string(p) {
				t.Fatalf("ParsePolicies(%q): field %q read as %s", s, fields[i], p)
			}
			seen[p] = true
			names = append(names, string(p))
		}
		again, err := ParsePolicies(strings.Join(names, ","))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("ParsePolicies(%q) = %v, but its list %q parses as %v, %v", s, got, strings.Join(names, ","), again, err)
		}
	})
}

// FuzzParseGUID checks the GUID parser of map files: it never panics, an
// accepted GUID has 16 hex digits in one of the three forms, and each form
// it prints parses back to the same GUID.
func FuzzParseGUID(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.conf")
	for _, p := range seeds {
		for _, l := range seedLines(f, p) {
			if fields := strings.Fields(l); len(fields) > 0 {
				f.Add(fields[0])
			}
		}
	}
	for _, s := range []string{"0x0002c90300a1b2c3", "0X0002C90300A1B2C3", "0002c90300a1b2c3", "0002:c903:00a1:b2c3",
		"0x", "0x+002c90300a1b2c3", "0002:c903:00a1:b2c", "::::", "ffff:ffff:ffff:ffff", "0002:c903:00a1:b2c3:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseGUID(s)
		if err != nil {
			if g != 0 || !strings.HasPrefix(err.Error(), "invalid GUID ") {
				t.Fatalf("parseGUID(%q) = %v, %v", s, g, err)
			}
			return
		}
		digits := strings.ReplaceAll(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"), ":", "")
		if len(digits) != 16 || strings.Trim(digits, "0123456789abcdefABCDEF") != "" || len(s) > 19 {
			t.Fatalf("parseGUID(%q) = %v: not 16 hex digits in a known form", s, g)
		}
		for _, form := range []string{g.String(), fmt.Sprintf("0x%016x", uint64(g)), fmt.Sprintf("%016X", uint64(g))} {
			if again, err := parseGUID(form); err != nil || again != g {
				t.Fatalf("parseGUID(%q) = %v, but %q parses as %v, %v", s, g, form, again, err)
			}
		}
	})
}
