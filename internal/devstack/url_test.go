package devstack_test

import (
	"net"
	"testing"

	"github.com/actloop/actloop/internal/devstack"
)

// URLOf names a listener by an address a client on the host can dial.
func TestURLOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr *net.TCPAddr
		want string
	}{
		{"loopback", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080"},
		{"every IPv4 interface", &net.TCPAddr{IP: net.IPv4zero, Port: 41234}, "http://127.0.0.1:41234"},
		{"every interface", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://[::1]:8080"},
		{"IPv6 loopback", &net.TCPAddr{IP: net.IPv6loopback, Port: 9}, "http://[::1]:9"},
		{"a host's address", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 80}, "http://10.1.2.3:80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := devstack.URLOf(tc.addr); got != tc.want {
				t.Errorf("URLOf(%v) = %q, want %q", tc.addr, got, tc.want)
			}
		})
	}
}
