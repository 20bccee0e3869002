// Command pause is the sandbox ("infra") container of every pod on the local real node.
//
// Each pod's namespaces are held open by one process that does nothing: this one. It waits
// for SIGTERM or SIGINT and exits 0 then. When the pod shares one process namespace, it is
// PID 1 there and so inherits every orphaned process: it reaps them (on SIGCHLD), or they
// would stay zombies until the pod ends. Written for this project (no cgo, so the binary is
// static and the image needs nothing else).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not PID 1, so orphans of the pod are not ours to reap")
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reapZombies()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down on %v\n", sig)
		os.Exit(0)
	}
}

// reapZombies collects every child that has exited. Signals coalesce (two children exiting
// together raise one SIGCHLD), hence the loop until none is left.
func reapZombies() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
