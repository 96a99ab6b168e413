module p4fleet.dev/hack/pause

go 1.24.0
