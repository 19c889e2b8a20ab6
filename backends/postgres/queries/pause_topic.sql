-- PauseTopic: $1 topic. Pausing a paused topic keeps its since.
INSERT INTO {pause_topic} (topic) VALUES ($1) ON CONFLICT (topic) DO NOTHING
