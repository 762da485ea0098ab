package rename

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmatool/rdmatool/rdmanl"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		reason string // "" means valid
	}{
		{"plain", "fab0-hca0", ""},
		{"guid name", "rocex525400fffec0ffee", ""},
		{"63 bytes", strings.Repeat("a", 63), ""},
		{"utf-8", "näme", ""},
		{"hash inside", "lab#1", ""},
		{"empty", "", "empty"},
		{"64 bytes", strings.Repeat("a", 64), "64 bytes long, the kernel keeps at most 63"},
		{"dot", ".", "reserved by sysfs"},
		{"dot dot", "..", "reserved by sysfs"},
		{"three dots are fine", "...", ""},
		{"slash", "a/b", "contains '/'"},
		{"percent", "mlx5_%d", "contains '%' (the kernel reads it as a name pattern)"},
		{"space", "a b", "contains whitespace"},
		{"tab", "a\tb", "contains whitespace"},
		{"newline", "a\n", "contains whitespace"},
		{"no-break space", "a\u00a0b", "contains whitespace"},
		{"control", "a\x01b", "contains a control character"},
		{"nul", "a\x00b", "contains a control character"},
		{"invalid utf-8", "a\xffb", "not valid UTF-8"},
		{"right-to-left override", "fab0\u202ehca", "contains the invisible format character U+202E"},
		{"zero-width space", "fab0\u200b", "contains the invisible format character U+200B"},
		{"byte order mark", "\ufefffab0", "contains the invisible format character U+FEFF"},
		{"soft hyphen", "fab\u00ad0", "contains the invisible format character U+00AD"},
		{"tag character", "fab0\U000E0041", "contains the invisible format character U+E0041"},
		{"leading dash", "-fab0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.in)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			var ne *NameError
			if !errors.As(err, &ne) || ne.Reason != tt.reason {
				t.Fatalf("ValidateName(%q) = %v, want reason %q", tt.in, err, tt.reason)
			}
			if !errors.Is(err, ErrInvalidName) {
				t.Errorf("errors.Is(%v, ErrInvalidName) = false", err)
			}
		})
	}
}

func TestGUIDName(t *testing.T) {
	const guid = rdmanl.GUID(0x525400fffec0ffee)
	tests := []struct {
		protocol string
		guid     rdmanl.GUID
		want     string
	}{
		{"roce", guid, "rocex525400fffec0ffee"},
		{"ib", 0x0002c90300a1b2c3, "ibx0002c90300a1b2c3"},
		{"iw", 0x000000fffe000201, "iwx000000fffe000201"},
		{"opa", 1, "opax0000000000000001"},
		{"usnic", 0xffffffffffffffff, "usnicxffffffffffffffff"},
		{"", guid, "rdmax525400fffec0ffee"}, // no DEV_PROTOCOL attribute
		// rdma_rename copies the kernel's protocol string as it is; a
		// protocol a future kernel adds gets no "rdma" prefix there either.
		{"xyz", guid, "xyzx525400fffec0ffee"},
		// rdma-core's own example (kernel-boot/rdma_rename.c).
		{"roce", 0x525400c0fe123455, "rocex525400c0fe123455"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got, err := guidPolicyName(rdmanl.Device{Name: "dev0", Protocol: tt.protocol, NodeGUID: tt.guid})
			if err != nil || got != tt.want {
				t.Fatalf("guidPolicyName(%q, %s) = %q, %v, want %q", tt.protocol, tt.guid, got, err, tt.want)
			}
			if err := ValidateName(got); err != nil {
				t.Errorf("guidPolicyName gave an invalid name: %v", err)
			}
		})
	}
	if got, err := guidPolicyName(rdmanl.Device{Protocol: "roce"}); err == nil {
		t.Errorf("guidPolicyName(zero GUID) = %q, want an error", got)
	}
}

func TestParseGUID(t *testing.T) {
	const want = rdmanl.GUID(0x0002c90300a1b2c3)
	tests := []struct {
		in   string
		want rdmanl.GUID
		ok   bool
	}{
		{"0002:c903:00a1:b2c3", want, true},
		{"0002:C903:00A1:B2C3", want, true},
		{"0x0002c90300a1b2c3", want, true},
		{"0X0002C90300A1B2C3", want, true},
		{"0002c90300a1b2c3", want, true},
		{"ffff:ffff:ffff:ffff", 0xffffffffffffffff, true},
		{"0000:0000:0000:0000", 0, true}, // parses; the map file refuses it
		{"", 0, false},
		{"2:c903:a1:b2c3", 0, false},           // groups need 4 digits
		{"0002:c903:00a1:b2c3:0000", 0, false}, // 5 groups
		{"0002:c903:00a1", 0, false},
		{"0x2c90300a1b2c3", 0, false}, // 0x needs all 16 digits
		{"0x", 0, false},
		{"2c90300a1b2c3", 0, false},
		{"0002c90300a1b2c3a", 0, false},
		{"0002:c903:00a1:b2cg", 0, false},
		{"+002c90300a1b2c3", 0, false},
		{"00:02:c9:03:00:a1:b2:c3", 0, false},
		{"0x0x02c90300a1b2c3", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseGUID(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("parseGUID(%q) = %s, %v, want %s (ok %v)", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{"map,guid", "map guid", ""},
		{"guid", "guid", ""},
		{"pci, guid ,keep", "pci guid keep", ""},
		{"map,,guid", "", `rename: empty policy in "map,,guid"`},
		{"", "", `rename: empty policy in ""`},
		{"onboard", "", `rename: unknown policy "onboard" (want map, guid, pci or keep)`},
		{"guid,guid", "", `rename: policy guid listed twice in "guid,guid"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePolicies(tt.in)
			if tt.wantErr != "" {
				var pe *PoliciesError
				if err == nil || err.Error() != tt.wantErr || !errors.As(err, &pe) || pe.List != tt.in ||
					"rename: "+pe.Err.Error() != tt.wantErr {
					t.Fatalf("ParsePolicies(%q) error = %v, want a *PoliciesError %q", tt.in, err, tt.wantErr)
				}
				return
			}
			var s []string
			for _, p := range got {
				s = append(s, string(p))
			}
			if err != nil || strings.Join(s, " ") != tt.want {
				t.Fatalf("ParsePolicies(%q) = %v, %v, want %s", tt.in, got, err, tt.want)
			}
		})
	}
}
