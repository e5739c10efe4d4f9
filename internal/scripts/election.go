package scripts

// The election's own scripts. Its queue, grants and releases are the fair lock's, with a
// record of the leader (lib/queue.lua).
var (
	ElectionLeader   = load("election_leader.lua")
	ElectionProclaim = load("election_proclaim.lua")
	ElectionRenew    = load("election_renew.lua")
)
