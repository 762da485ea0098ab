package rowfilter

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
)

// Filter selects listing rows by iproute2-style "name value" pairs: numeric
// fields take numbers, ranges and lists ("lqpn 17", "lqpn 0-6", "pid
// 10,20-30"), other fields exact words ("state ERR"). Names are the row's
// JSON field names; iproute2's hyphens ("sq-psn") work too.
type Filter struct {
	terms []term
}

type term struct {
	field  string
	ranges [][2]uint64 // numeric fields
	words  []string    // other fields
}

// Spec says what a listing's filters are.
type Spec struct {
	// Row is a value of the row type: its JSON field names, less those
	// tagged filter:"-", name the filters.
	Row any
	// Enums gives, by JSON field name, the values an enumerated string
	// field takes (the kernel's names, as the rows print them): any other
	// value is refused, so that a mistyped state is an error rather than
	// an empty listing. A value a newer kernel added prints as
	// "unknown(N)", which is accepted too. Boolean fields take true and
	// false without being listed here.
	Enums map[string]func() []string
	// Selectors are names the caller selects by rather than matches
	// (dev, link): Parse returns their values by name. They are
	// alternatives: at most one of them is given, once.
	Selectors []string
}

// Parse checks every name against the fields of spec.Row and parses the
// values. The values of selectors are returned by name, not matched.
// Errors are one line and quote what was typed cut at quote.Max bytes.
func Parse(spec Spec, args []string) (Filter, map[string]string, error) {
	rt := reflect.TypeOf(spec.Row)
	fields := map[string]reflect.StructField{}
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && f.Tag.Get("filter") != "-" {
			fields[name] = f
		}
	}
	if len(args)%2 != 0 {
		return Filter{}, nil, fmt.Errorf("filter %s has no value", quote.String(args[len(args)-1]))
	}
	var flt Filter
	extras := map[string]string{}
	selected := ""                    // the selector given, as typed: "dev rxe0"
	given := map[string][]typedTerm{} // the terms of each filter given
	for i := 0; i < len(args); i += 2 {
		name := strings.ReplaceAll(args[i], "-", "_")
		value := args[i+1]
		if slices.Contains(spec.Selectors, name) {
			this := name + " " + quote.String(value)
			if selected != "" {
				return Filter{}, nil, fmt.Errorf("%s and %s: give one of %s, once", selected, this, strings.Join(spec.Selectors, " and "))
			}
			selected = this
			extras[name] = value
			continue
		}
		f, ok := fields[name]
		if !ok {
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range fields {
					if !yield(strings.ReplaceAll(n, "_", "-")) {
						return
					}
				}
			})
			return Filter{}, nil, fmt.Errorf("unknown filter %s (valid: %s)", quote.String(args[i]), strings.Join(append(names, spec.Selectors...), " "))
		}
		t := term{field: f.Name}
		switch f.Type.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Int, reflect.Int64:
			most := uint64(1)<<(f.Type.Bits()-1) - 1 // signed
			if f.Type.Kind() != reflect.Int && f.Type.Kind() != reflect.Int64 {
				most = most<<1 | 1
			}
			for part := range strings.SplitSeq(value, ",") {
				lo, hi, isRange := strings.Cut(part, "-")
				a, err := parseNumber(lo)
				if err != nil {
					return Filter{}, nil, fmt.Errorf("filter %s: %s is not a number or range", args[i], quote.String(value))
				}
				b := a
				if isRange {
					if b, err = parseNumber(hi); err != nil || b < a {
						return Filter{}, nil, fmt.Errorf("filter %s: bad range %s", args[i], quote.String(part))
					}
				}
				if a > most || b > most {
					return Filter{}, nil, fmt.Errorf("filter %s: %s is out of range (at most %d)", args[i], quote.String(part), most)
				}
				t.ranges = append(t.ranges, [2]uint64{a, b})
			}
		default:
			t.words = strings.Split(value, ",")
			valid := spec.Enums[name]
			if f.Type.Kind() == reflect.Bool {
				valid = boolWords
			}
			if valid != nil {
				if err := checkWords(args[i], t.words, valid()); err != nil {
					return Filter{}, nil, err
				}
			}
		}
		// Terms are ANDed: a filter given again narrows what it selected
		// ("lqpn 0-10 lqpn 6-20" is 6 to 10), and one that shares no
		// value with it ("state ERR state INIT") would list nothing
		// whatever the kernel holds: refused.
		this := args[i] + " " + quote.String(value)
		for _, before := range given[name] {
			if !flt.terms[before.term].overlaps(t) {
				return Filter{}, nil, fmt.Errorf("%s and %s select nothing together: filters are ANDed; give one with a list (%s A,B)",
					before.typed, this, args[i])
			}
		}
		given[name] = append(given[name], typedTerm{typed: this, term: len(flt.terms)})
		flt.terms = append(flt.terms, t)
	}
	return flt, extras, nil
}

// typedTerm is a term of a Filter being parsed and what was typed for it.
type typedTerm struct {
	typed string
	term  int
}

// overlaps reports whether some value passes both t and u, terms of one
// field.
func (t term) overlaps(u term) bool {
	if t.ranges != nil {
		for _, a := range t.ranges {
			if slices.ContainsFunc(u.ranges, func(b [2]uint64) bool { return a[0] <= b[1] && b[0] <= a[1] }) {
				return true
			}
		}
		return false
	}
	return slices.ContainsFunc(t.words, func(w string) bool { return slices.Contains(u.words, w) })
}

// boolWords are the values of a boolean field, as the rows print them.
func boolWords() []string { return []string{"true", "false"} }

// checkWords refuses a word of an enumerated filter that is not one of
// valid, nor "unknown(N)": what a row prints for a value a newer kernel
// added.
func checkWords(filter string, words, valid []string) error {
	for _, w := range words {
		if slices.Contains(valid, w) {
			continue
		}
		if n, ok := strings.CutPrefix(w, "unknown("); ok && strings.HasSuffix(n, ")") {
			if _, err := strconv.ParseUint(n[:len(n)-1], 10, 32); err == nil {
				continue
			}
		}
		return fmt.Errorf("filter %s: unknown value %s (valid: %s)", filter, quote.String(w), strings.Join(valid, " "))
	}
	return nil
}

// Empty reports whether f has no terms: every row passes.
func (f Filter) Empty() bool { return len(f.terms) == 0 }

// Match reports whether row, of the type f was parsed for, passes every
// term.
func (f Filter) Match(row any) bool {
	rv := reflect.Indirect(reflect.ValueOf(row))
	for _, t := range f.terms {
		fv := rv.FieldByName(t.field)
		if t.ranges != nil {
			var n uint64
			if fv.CanUint() {
				n = fv.Uint()
			} else {
				n = uint64(fv.Int())
			}
			if !slices.ContainsFunc(t.ranges, func(r [2]uint64) bool { return n >= r[0] && n <= r[1] }) {
				return false
			}
			continue
		}
		s := fmt.Sprint(fv.Interface())
		if st, ok := fv.Interface().(fmt.Stringer); ok {
			s = st.String()
		}
		if !slices.Contains(t.words, s) {
			return false
		}
	}
	return true
}

// parseNumber reads a decimal number, or a hex one with 0x (keys are hex):
// "010" is ten, not octal eight.
func parseNumber(s string) (uint64, error) {
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// ParseLink splits "DEV[/PORT]": a device name and a port from 1, or 0 when
// none is given ("rxe0", "rxe0/", "rxe0/-"). The device name is checked
// by CheckDevice.
func ParseLink(s string) (dev string, port uint32, err error) {
	dev, p, hasPort := strings.Cut(s, "/")
	if dev == "" {
		return "", 0, fmt.Errorf("link %s: no device name", quote.String(s))
	}
	if err := CheckDevice(dev); err != nil {
		return "", 0, err
	}
	if hasPort && p != "" && p != "-" {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil || n == 0 {
			return "", 0, fmt.Errorf("link %s: port must be a number from 1", quote.String(s))
		}
		port = uint32(n)
	}
	return dev, port, nil
}

// maxDeviceName is the longest name an RDMA device can have:
// IB_DEVICE_NAME_MAX (64, include/rdma/ib_verbs.h) counts the NUL.
const maxDeviceName = 63

// CheckDevice refuses a device name no RDMA device can have, before
// anything asks the kernel: an empty one, or one longer than the kernel
// keeps. Any other name may exist (the kernel accepts spaces and control
// characters in a rename).
func CheckDevice(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("no RDMA device has an empty name")
	case len(name) > maxDeviceName:
		return fmt.Errorf("device %s: no RDMA device has a name longer than %d bytes", quote.String(name), maxDeviceName)
	}
	return nil
}
