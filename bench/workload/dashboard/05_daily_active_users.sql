-- Daily active users per arm (one line per arm on a time chart).
SELECT date_trunc('day', event_time) AS event_day,
       arm,
       count(DISTINCT user_id) AS users
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY date_trunc('day', event_time), arm
ORDER BY event_day, arm
