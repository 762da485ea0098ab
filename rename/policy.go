package rename

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

// Policy is one way of choosing a device's name.
type Policy string

// The policies. Each either names a device or skips it with a reason, and
// the next one in the configured order gets a turn.
const (
	// PolicyMap takes the name the map file gives the node GUID.
	PolicyMap Policy = "map"
	// PolicyGUID is rdma_rename's NAME_GUID: "rocex525400c0fe123455".
	PolicyGUID Policy = "guid"
	// PolicyPCI is rdma_rename's NAME_PCI: "ibp59s0f1".
	PolicyPCI Policy = "pci"
	// PolicyKeep keeps the current name (rdma_rename's NAME_KERNEL); it
	// never skips, so policies after it never run.
	PolicyKeep Policy = "keep"
)

// DefaultPolicies is the policy list used when none is given.
const DefaultPolicies = "map,guid"

// ParsePolicies parses a comma-separated policy list such as "map,guid".
// A list it refuses is a *PoliciesError.
func ParsePolicies(s string) ([]Policy, error) {
	var out []Policy
	for _, f := range strings.Split(s, ",") {
		p := Policy(strings.TrimSpace(f))
		switch p {
		case PolicyMap, PolicyGUID, PolicyPCI, PolicyKeep:
		case "":
			return nil, &PoliciesError{List: s, Err: fmt.Errorf("empty policy in %s", quote.String(s))}
		default:
			return nil, &PoliciesError{List: s, Err: fmt.Errorf("unknown policy %s (want map, guid, pci or keep)", quote.String(string(p)))}
		}
		for _, q := range out {
			if q == p {
				return nil, &PoliciesError{List: s, Err: fmt.Errorf("policy %s listed twice in %s", p, quote.String(s))}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// PoliciesError is a policy list ParsePolicies refuses: List as given, and
// Err why, without the package's prefix, for a caller that names the
// setting its own way.
type PoliciesError struct {
	List string
	Err  error
}

func (e *PoliciesError) Error() string { return "rename: " + e.Err.Error() }
func (e *PoliciesError) Unwrap() error { return e.Err }

// namer chooses names by evaluating the policies in order.
type namer struct {
	policies []Policy
	m        *Map   // nil: the map policy finds no names
	mapNote  string // why m is nil, for skip reasons
	pci      func(dev string) (sysfs.PCILocation, error)
}

// choice is what the policies chose for one device. policy is "" when all
// of them skipped it; reason then lists why each did.
type choice struct {
	to     string
	policy Policy
	reason string
}

func (n *namer) choose(d rdmanl.Device) choice {
	var skips []string
	for _, p := range n.policies {
		switch p {
		case PolicyMap:
			switch {
			case n.m == nil:
				skips = append(skips, "map: "+n.mapNote)
			case d.NodeGUID == 0:
				skips = append(skips, "map: "+errZeroGUID.Error())
			default:
				e, ok := n.m.Lookup(d.NodeGUID)
				if !ok {
					skips = append(skips, fmt.Sprintf("map: no entry for %s in %s", d.NodeGUID, n.m.File))
					continue
				}
				return choice{to: e.Name, policy: p, reason: fmt.Sprintf("map %s:%d", n.m.File, e.Line)}
			}
		case PolicyGUID:
			name, err := guidPolicyName(d)
			if err != nil {
				skips = append(skips, "guid: "+err.Error())
				continue
			}
			return choice{to: name, policy: p, reason: "guid " + d.NodeGUID.String()}
		case PolicyPCI:
			loc, err := n.pci(d.Name)
			if err != nil {
				reason := err.Error()
				if errors.Is(err, sysfs.ErrNotPCI) {
					reason = "not a PCI device"
				}
				skips = append(skips, "pci: "+reason)
				continue
			}
			return choice{to: pciPolicyName(d.Protocol, loc), policy: p, reason: "pci " + loc.Addr}
		case PolicyKeep:
			return choice{to: d.Name, policy: p, reason: "keep"}
		}
	}
	return choice{to: d.Name, reason: strings.Join(skips, "; ")}
}
