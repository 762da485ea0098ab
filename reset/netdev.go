package reset

import (
	"errors"
	"fmt"
	"net"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"
)

// Netdevs are changed through route netlink with
// github.com/jsimonetti/rtnetlink: the rtnetlink client of the
// mdlayher/netlink family rdmanl is built on, with typed link and address
// messages, so rdmatool carries no hand-made ifinfomsg/ifaddrmsg codec.

// netdevState is what a netdev's RDMA users depend on and an unbind loses:
// its name, whether it is up, and its IP addresses (RoCE GIDs and iWARP
// connections derive from them). The MAC address comes back from the
// hardware.
type netdevState struct {
	Name  string           `json:"name"`
	MAC   net.HardwareAddr `json:"mac"` // a driver may pick a new one (netdevsim)
	Up    bool             `json:"up"`
	Addrs []netdevAddr     `json:"addrs"`
}

type netdevAddr struct {
	IP     net.IP `json:"ip"`
	Prefix uint8  `json:"prefix"`
}

// linkByName finds a netdev's route netlink link message.
func linkByName(c *rtnetlink.Conn, name string) (rtnetlink.LinkMessage, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return rtnetlink.LinkMessage{}, fmt.Errorf("reset: netdev %s: %w", name, err)
	}
	m, err := c.Link.Get(uint32(ifi.Index))
	if err != nil {
		return rtnetlink.LinkMessage{}, fmt.Errorf("reset: get netdev %s: %w", name, err)
	}
	return m, nil
}

// withLink dials route netlink and calls fn with netdev name's link.
func withLink(name string, fn func(c *rtnetlink.Conn, l rtnetlink.LinkMessage) error) error {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("reset: route netlink: %w", err)
	}
	defer c.Close()
	l, err := linkByName(c, name)
	if err != nil {
		return err
	}
	return fn(c, l)
}

// readNetdev reads the netdev's state.
func readNetdev(name string) (st netdevState, err error) {
	err = withLink(name, func(c *rtnetlink.Conn, l rtnetlink.LinkMessage) error {
		st, err = readLink(c, name, l)
		return err
	})
	return st, err
}

func readLink(c *rtnetlink.Conn, name string, l rtnetlink.LinkMessage) (netdevState, error) {
	st := netdevState{Name: name, Up: l.Flags&unix.IFF_UP != 0, Addrs: []netdevAddr{}}
	if l.Attributes != nil {
		st.MAC = l.Attributes.Address
	}
	addrs, err := c.Address.List()
	if err != nil {
		return netdevState{}, fmt.Errorf("reset: list addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if a.Index != l.Index || a.Attributes == nil || a.Scope == unix.RT_SCOPE_LINK {
			continue // link-local addresses come back on their own
		}
		ip := a.Attributes.Local
		if ip == nil {
			ip = a.Attributes.Address
		}
		st.Addrs = append(st.Addrs, netdevAddr{IP: ip, Prefix: a.PrefixLength})
	}
	return st, nil
}

// setLinkUp sets netdev name up or down.
func setLinkUp(name string, up bool) error {
	return withLink(name, func(c *rtnetlink.Conn, l rtnetlink.LinkMessage) error { return setUp(c, name, l, up) })
}

func setUp(c *rtnetlink.Conn, name string, l rtnetlink.LinkMessage, up bool) error {
	var flags uint32
	if up {
		flags = unix.IFF_UP
	}
	if err := c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: l.Index, Flags: flags, Change: unix.IFF_UP}); err != nil {
		return fmt.Errorf("reset: set %s %s: %w", name, map[bool]string{true: "up", false: "down"}[up], err)
	}
	return nil
}

// restoreNetdev gives netdev cur (the function's netdev after a rebind)
// the name, addresses and up state st recorded.
func restoreNetdev(cur string, st netdevState) error {
	return withLink(cur, func(c *rtnetlink.Conn, l rtnetlink.LinkMessage) error { return restoreLink(c, cur, l, st) })
}

func restoreLink(c *rtnetlink.Conn, cur string, l rtnetlink.LinkMessage, st netdevState) error {
	if cur != st.Name { // a down netdev can be renamed
		err := c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: l.Index, Attributes: &rtnetlink.LinkAttributes{Name: st.Name}})
		if err != nil {
			return fmt.Errorf("reset: rename netdev %s to %s: %w", cur, st.Name, err)
		}
	}
	// The MAC address gives rxe its node GUID.
	if len(st.MAC) > 0 && (l.Attributes == nil || l.Attributes.Address.String() != st.MAC.String()) {
		err := c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: l.Index, Attributes: &rtnetlink.LinkAttributes{Address: st.MAC}})
		if err != nil {
			return fmt.Errorf("reset: set the MAC address of %s to %s: %w", st.Name, st.MAC, err)
		}
	}
	for _, a := range st.Addrs {
		fam := uint8(unix.AF_INET6)
		if a.IP.To4() != nil {
			fam = unix.AF_INET
		}
		attrs := &rtnetlink.AddressAttributes{Address: a.IP, Local: a.IP}
		if fam == unix.AF_INET6 {
			attrs.Local = nil
		}
		err := c.Address.New(&rtnetlink.AddressMessage{Family: fam, PrefixLength: a.Prefix, Index: l.Index, Attributes: attrs})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("reset: add address %s/%d to %s: %w", a.IP, a.Prefix, st.Name, err)
		}
	}
	if st.Up {
		return setUp(c, st.Name, l, true)
	}
	return nil
}
