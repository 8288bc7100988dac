-- Daily revenue per arm.
SELECT date_trunc('day', event_time) AS event_day,
       arm,
       count(amount) AS purchases,
       sum(amount) AS revenue
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY date_trunc('day', event_time), arm
ORDER BY event_day, arm
