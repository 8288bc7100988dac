-- Events per arm that came from the feed (substring LIKE on the URL).
SELECT arm, count(*) AS events
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
  AND page_url LIKE '%src=feed%'
GROUP BY arm
ORDER BY arm
