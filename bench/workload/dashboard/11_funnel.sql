-- Funnel per arm: events and distinct users at each action
-- (ordered by name: add_to_cart, click, purchase, view).
SELECT action,
       arm,
       count(*) AS events,
       count(DISTINCT user_id) AS users
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY action, arm
ORDER BY action, arm
