package core

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ZMQEndpoint is a parsed ZeroMQ endpoint: tcp://host:port (an IPv6 host in
// brackets) or ipc://path. It is the one reading of an endpoint string in
// kvselect: registration validates with it and the ZMQ ingress dials and
// binds with it, so a worker accepted here is one the ingress can reach.
type ZMQEndpoint struct {
	// Network is "tcp" or "unix" (ipc://).
	Network string
	// Host and Port are the tcp host as written ("*" is vLLM's bind-all
	// notation) and port; Path is the ipc socket path.
	Host string
	Port uint16
	Path string
}

// ParseZMQEndpoint parses ep. inproc:// is refused: it names a socket inside
// one process, and the publishers kvselect listens to are other processes.
func ParseZMQEndpoint(ep string) (ZMQEndpoint, error) {
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok {
		return ZMQEndpoint{}, fmt.Errorf("missing transport (expected tcp:// or ipc://)")
	}
	switch scheme {
	case "ipc":
		if rest == "" {
			return ZMQEndpoint{}, fmt.Errorf("empty ipc address")
		}
		return ZMQEndpoint{Network: "unix", Path: rest}, nil
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return ZMQEndpoint{}, err
		}
		if host == "" {
			return ZMQEndpoint{}, fmt.Errorf("empty host")
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return ZMQEndpoint{}, fmt.Errorf("invalid port %q", port)
		}
		return ZMQEndpoint{Network: "tcp", Host: host, Port: uint16(n)}, nil
	}
	return ZMQEndpoint{}, fmt.Errorf("unsupported transport %q (expected tcp:// or ipc://)", scheme)
}

// DialAddr is the address to dial: a wildcard host ("*", "", 0.0.0.0 or
// ::) means this machine, as Dynamo's listener reads vLLM's bind-all
// endpoints.
func (e ZMQEndpoint) DialAddr() string {
	if e.Network != "tcp" {
		return e.Path
	}
	host := e.Host
	switch host {
	case "*", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, strconv.Itoa(int(e.Port)))
}

// ListenAddr is the address to bind: "*" binds every interface.
func (e ZMQEndpoint) ListenAddr() string {
	if e.Network != "tcp" {
		return e.Path
	}
	host := e.Host
	if host == "*" {
		host = ""
	}
	return net.JoinHostPort(host, strconv.Itoa(int(e.Port)))
}

// checkDialable parses a worker's endpoint for dialing: a tcp port of 0
// cannot be dialed.
func checkDialable(ep string) (ZMQEndpoint, error) {
	z, err := ParseZMQEndpoint(ep)
	if err == nil && z.Network == "tcp" && z.Port == 0 {
		err = fmt.Errorf("invalid port \"0\"")
	}
	return z, err
}

// allowedBy reports whether the service may dial z under networks (nil: any
// endpoint). With networks set, only tcp endpoints whose host is an IP
// address inside one of them pass (a wildcard host is checked as the
// loopback address it dials): a host name could resolve elsewhere by the
// time it is dialed, and an ipc path is a local file.
func (z ZMQEndpoint) allowedBy(networks []netip.Prefix) error {
	if networks == nil {
		return nil
	}
	if z.Network != "tcp" {
		return fmt.Errorf("ipc endpoints are not allowed when KV endpoint networks are restricted")
	}
	host, _, _ := net.SplitHostPort(z.DialAddr())
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("host %q is not an IP address; only IP addresses can be checked against the allowed KV endpoint networks", z.Host)
	}
	addr = addr.Unmap()
	for _, n := range networks {
		if n.Contains(addr) {
			return nil
		}
	}
	return fmt.Errorf("address %s is outside the allowed KV endpoint networks", addr)
}
