-- Top 10 regions by events, with their distinct users.
SELECT region,
       count(*) AS events,
       count(DISTINCT user_id) AS users
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY region
ORDER BY events DESC, region
LIMIT 10
