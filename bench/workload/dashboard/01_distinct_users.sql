-- Distinct users per arm (the experiment's headline sample size).
SELECT arm, count(DISTINCT user_id) AS users
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY arm
ORDER BY arm
