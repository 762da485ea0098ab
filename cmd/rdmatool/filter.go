package main

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// filter selects listing rows by iproute2-style "name value" pairs: numeric
// fields take numbers, ranges and lists ("lqpn 17", "lqpn 0-6", "pid
// 10,20-30"), other fields exact words ("state ERR"). Names are the row's
// JSON field names; iproute2's hyphens ("sq-psn") work too.
type filter struct {
	terms []filterTerm
}

type filterTerm struct {
	field  string
	ranges [][2]uint64 // numeric fields
	words  []string    // other fields
}

// parseFilter checks every name against the fields of row and parses the
// values. Extra names (like "link") are handled by the caller and skipped.
func parseFilter(row any, args []string, extra ...string) (filter, map[string]string, error) {
	rt := reflect.TypeOf(row)
	fields := map[string]reflect.StructField{}
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && f.Tag.Get("filter") != "-" {
			fields[name] = f
		}
	}
	if len(args)%2 != 0 {
		return filter{}, nil, fmt.Errorf("filter %q has no value", args[len(args)-1])
	}
	var flt filter
	extras := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		name := strings.ReplaceAll(args[i], "-", "_")
		value := args[i+1]
		if slices.Contains(extra, name) {
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
			return filter{}, nil, fmt.Errorf("unknown filter %q (valid: %s)", args[i], strings.Join(append(names, extra...), " "))
		}
		term := filterTerm{field: f.Name}
		switch f.Type.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Int, reflect.Int64:
			for part := range strings.SplitSeq(value, ",") {
				lo, hi, isRange := strings.Cut(part, "-")
				a, err := parseNumber(lo)
				if err != nil {
					return filter{}, nil, fmt.Errorf("filter %s: %q is not a number or range", args[i], value)
				}
				b := a
				if isRange {
					if b, err = parseNumber(hi); err != nil || b < a {
						return filter{}, nil, fmt.Errorf("filter %s: bad range %q", args[i], part)
					}
				}
				term.ranges = append(term.ranges, [2]uint64{a, b})
			}
		default:
			term.words = strings.Split(value, ",")
		}
		flt.terms = append(flt.terms, term)
	}
	return flt, extras, nil
}

// match reports whether row passes every term.
func (f filter) match(row any) bool {
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
