// Command etcd is a wrapper around etcd's own main: etcd's go.mod has relative
// replaces, so `go install go.etcd.io/etcd/server/v3@vX` cannot build it directly.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
