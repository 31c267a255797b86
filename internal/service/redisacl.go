package service

// The key namespaces of actloop's Redis (the hash tags keep each
// namespace's multi-key scripts on one cluster slot).
const (
	redisTrajKeys        = "actloop:traj:*"          // a trajectory's state, turns and result (traj.Store)
	redisCoordinatorKeys = "actloop:{coordinator}:*" // the active and waiting index, counts (traj's index)
	redisGroupKeys       = "actloop:{group:*"        // group membership and completion (traj's groups)
	redisPredictKeys     = "actloop:{predict}:*"     // the predictor's history and learned model
)

// RedisCommands are the command rules of every service's Redis user, after
// -@all (ACL SETUSER's): the connection handshake (HELLO, AUTH, CLIENT
// SETINFO, PING), MULTI/EXEC and WATCH, the scripts of traj and predict
// (EVALSHA, and EVAL when the server has not cached a script yet), for a
// Redis Cluster reading the slot map and reading from replicas, and the
// read and write commands but none that could end the server or others'
// data (@dangerous: FLUSHALL, KEYS, DEBUG, …).
var RedisCommands = []string{"+@connection", "+@transaction",
	"+evalsha", "+eval", "+evalsha_ro", "+eval_ro", "+script|load", "+script|exists",
	"+cluster|slots", "+cluster|shards", "+cluster|nodes", "+readonly", "+readwrite",
	"+@read", "+@write", "-@dangerous"}

// RedisTable is docs/security.md's Redis users table: the key patterns
// (glob-style, ACL SETUSER's ~pattern) of the ACL user of each service
// that uses Redis (the gateway does not), by user name. Each may reach
// only these keys, run only RedisCommands and use no Pub/Sub channel; the
// default user is the administrators'. cmd/actloop's tests check the
// documentation against it and run every service, recovery included,
// under it, with Redis's ACL LOG as the judge.
var RedisTable = map[string][]string{
	NATSCoordinator: {redisTrajKeys, redisCoordinatorKeys, redisGroupKeys},
	NATSGenWorker:   {redisTrajKeys},
	NATSEnvWorker:   {redisTrajKeys},
	NATSPredictor:   {redisPredictKeys},
}

// RedisReadTable is the same table's read-only column: key patterns a
// user may read but not write (ACL SETUSER's %R~pattern, Redis 7). The
// predictor reads a trajectory's conversation for its http backend.
var RedisReadTable = map[string][]string{
	NATSPredictor: {redisTrajKeys},
}

// RedisRules are user's rules for ACL SETUSER (or a user directive of
// redis.conf or an ACL file) after its name, "on" and its password: its
// keys, no channels, RedisCommands.
func RedisRules(user string) []string {
	rules := []string{"resetkeys"}
	for _, k := range RedisTable[user] {
		rules = append(rules, "~"+k)
	}
	for _, k := range RedisReadTable[user] {
		rules = append(rules, "%R~"+k)
	}
	return append(append(rules, "resetchannels", "-@all"), RedisCommands...)
}
