// Command golookup resolves NAME with Go's own resolver (run it with
// GODEBUG=netdns=go) and prints the sorted addresses, one line, or
// "NOTFOUND" / "ERR <message>".
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: golookup NAME")
		os.Exit(64)
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(context.Background(), os.Args[1])
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			fmt.Println("NOTFOUND")
			os.Exit(2)
		}
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	seen := map[string]bool{}
	var out []string
	for _, a := range addrs {
		s := a.IP.String()
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	fmt.Println(strings.Join(out, " "))
}
