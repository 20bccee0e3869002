module mlmodel.dev/controlplane/pause

go 1.26.0
