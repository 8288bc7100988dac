-- Platform split per arm: events and distinct users.
SELECT platform,
       arm,
       count(*) AS events,
       count(DISTINCT user_id) AS users
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY platform, arm
ORDER BY platform, arm
